"""`train`: causal-LM training with the Hugging Face Trainer and DeepSpeed ZeRO (the run_clm job).

A library and its command, apart:
- options.py: what a run is (TrainFlags), the defaults, the DeepSpeed config it is handed;
- model.py and blocks.py: the tokenizer and model, the dataset cut into blocks;
- memory_check.py: the run's memory need against the node's, before the model is built;
- layout.py: how the ranks divide (ParallelLayout: tp x pp x dp), checked once; tensor_parallel.py and
  pipeline.py: what --tp-size and --pp-size refuse;
- run.py: `train(options, layout, training_flags)`, called once per rank, no command line involved: it builds
  the TrainingRun (training_run.py: what a run carries, its lifecycle) and hands it to its engine, the
  Trainer (trainer_engine.py) or DeepSpeed's pipeline engine (pipeline_run.py);
- cli.py: the `train` command: flags -> TrainFlags, every check that needs no torch, then the
  ranks (through `launch` for --nproc-per-node) or `train()` itself.
"""
