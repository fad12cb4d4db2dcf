"""The engines a TrainingRun is handed, one per loop: the HF Trainer's (hf_engine, with hf_trainer: the Trainer whose
writes are whole or absent) and DeepSpeed's pipeline engine's (pipeline_engine, with pipeline_layers: a causal LM as
the flat layer list of stages).
"""
