"""`train`: causal-LM training with the Hugging Face Trainer and DeepSpeed ZeRO (the run_clm job).

A library and its command, apart:
- options.py: what a run is (TrainFlags), the defaults, the DeepSpeed config it is handed; ds_settings.py: that
  config read once (DeepSpeedSettings, carried by the options: every module asks it, none reads the file);
  hf_flags.py: HF's flags checked before torch;
- model/: the tokenizer and model, LoRA, the fused loss, the speed and dropout switches; data/: the datasets
  cut into blocks;
- parallel/: how the ranks divide (ParallelLayout: tp x pp x dp), checked once, and what --tp-size and
  --pp-size refuse;
- sizing/: the run's memory need against the node's, the micro-batch and the global batch;
- checkpoints/: the background writer, the resume checks, and node_copies/ (checkpoints in the nodes' memory);
- run.py: `train(options, layout, training_flags)`, called once per rank, no command line involved: it builds
  the TrainingRun (training_run.py: what a run carries, its lifecycle) and hands it to its engine (engines/):
  the Trainer (hf_engine.py) or DeepSpeed's pipeline engine (pipeline_engine.py); callbacks/: what the run
  installs in its engine; secret_free.py: the arguments written without a token;
- cli.py: the `train` command: flags -> TrainFlags, every check that needs no torch, then the
  ranks (through `launch` for --nproc-per-node) or `train()` itself.
"""
