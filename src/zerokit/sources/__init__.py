"""What a run reads: where a model and its data come from, and the configs it is given.

model_source and hub_cache (a `--model` value, the HF cache read offline), offline and run_inputs (a run's inputs
found before it starts: local folders whole, Hub names cached), data (datasets: files, prepared
folders, the Hub's), embedded and corpus (the tiny default model, its tokenizer and generated corpus),
ds_configs (DeepSpeed configs by name) and ds_ops (the DeepSpeed ops a config makes the ranks load).
"""
