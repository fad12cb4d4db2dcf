"""Training facts: the files a training run reads and writes, and how to read them.

data and corpus (datasets, the generated default corpus), embedded (the tiny default model and tokenizer),
model_source and hub_cache (where a model comes from, offline), hf_flags and ds_configs (HF and DeepSpeed
configuration), ds_ops (the DeepSpeed ops a config makes the ranks load), lora (adapters), checkpoints and
outputs (what a folder holds, who owns it), step_clock (the timing callback inside a run), memory_need (the
memory a run needs, from numbers alone) and node_memory (this node's memory and OOM kills, as the kernel tells).
"""
