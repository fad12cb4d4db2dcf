"""`train`: causal-LM training with the Hugging Face Trainer and DeepSpeed ZeRO (the run_clm job).

zerokit's own flags are parsed here; every other flag is a `TrainingArguments` flag and goes
to HfArgumentParser, so `--learning_rate`, `--max_steps`, `--bf16` ... work as in run_clm.
Input is checked before torch is imported, so a typo fails in a second, not after start-up.
"""

from __future__ import annotations

import argparse
import base64
import json
import math
import os
import sys
import warnings
from dataclasses import dataclass
from pathlib import Path

from zerokit.errors import RunFailure, UserError
from zerokit.hf_flags import check_hf_flags
from zerokit.lora import LORA_FORMAT, parse_lora
from zerokit.paths import CONFIGS_DIR

# Defaults for the embedded default job (tiny model, generated corpus), sized for a 2-core CPU.
EMBEDDED_TRAINING_DEFAULTS = {
    "learning_rate": 3e-3,
    "warmup_steps": 20,
    "max_steps": 300,
    "per_device_train_batch_size": 16,
    "per_device_eval_batch_size": 32,
    "weight_decay": 0.01,
}
# Defaults for every job; a flag on the command line wins.
TRAINING_DEFAULTS = {
    "report_to": "none",
    "logging_steps": 10,
    "save_strategy": "no",
    "seed": 42,
    "ddp_find_unused_parameters": False,
}


@dataclass(frozen=True)
class TrainOptions:
    """zerokit's own `train` flags (the TrainingArguments ones are kept apart)."""

    ds_config: Path | None
    output_dir: Path
    overwrite: bool
    model: str | None
    model_type: str | None
    from_scratch: bool
    config_overrides: str | None
    tokenizer: str | None
    dataset: str | None
    text_column: str
    validation_split_percentage: int
    block_size: int | None
    nproc_per_node: int
    resume: str | None = None
    lora: str | None = None
    train_last_layers: int | None = None
    merge: bool = False
    deterministic: bool = False
    timings_dir: Path | None = None
    online: bool = False
    streaming: bool = False

    @property
    def embedded(self) -> bool:
        return self.model is None and self.model_type is None


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="train",
        allow_abbrev=False,  # a prefix (--learning_rat) is an unknown flag, not silently another one
        description="Train a causal LM with the HF Trainer and DeepSpeed ZeRO. With no --model/--dataset, "
        "trains the embedded default (tiny GPT-2 on a generated corpus). Any TrainingArguments flag "
        "(--learning_rate, --max_steps, --bf16, ...) is passed through.",
    )
    add = parser.add_argument
    add(
        "--config",
        default="zero2",
        help="DeepSpeed config: a JSON path or a bundled name "
        f"({', '.join(sorted(p.stem for p in CONFIGS_DIR.glob('*.json')))}); 'none' trains without DeepSpeed",
    )
    add("--output-dir", "--output_dir", default="runs/train", help="where the model and results go")
    add(
        "--overwrite",
        action="store_true",
        help="write into an output folder that is not empty; an earlier run's files there are replaced, others kept",
    )
    add("--model", help="Hub id or local folder, loaded with from_pretrained")
    add("--model-type", help="train from scratch from a fresh config of this type (e.g. gpt2, llama)")
    add("--from-scratch", action="store_true", help="take only the config of --model; random weights")
    add("--config-overrides", help='config changes for training from scratch, e.g. "n_layer=4,n_embd=128"')
    add("--tokenizer", help="tokenizer Hub id or folder (default: the model's)")
    add("--dataset", help="a .txt/.jsonl/.csv file, a folder of .txt files, a save_to_disk folder or a Hub name")
    add("--text-column", default="text", help="column holding the text in jsonl/csv/Arrow data")
    add("--validation-split-percentage", type=int, default=5, help="eval split taken from train when none exists")
    add("--block-size", type=int, help="tokens per training sequence (default: the model's maximum, at most 1024)")
    add("--nproc-per-node", type=int, default=1, help="start this many local ranks (CPU cores or GPUs)")
    add("--resume", metavar="auto|PATH", help="resume from a checkpoint; auto: the newest complete one, if any")
    add("--lora", nargs="?", const="", metavar="SPEC", help=f"train LoRA adapters (peft): {LORA_FORMAT}")
    add("--train-last-layers", type=int, metavar="N", help="train only the last N transformer layers")
    add("--merge", action="store_true", help="with --lora: also write the base with the adapter merged into merged/")
    add(
        "--deterministic",
        action="store_true",
        help="full_determinism and, on CPU, torch's Adam: bit-exact resumes",
    )
    add("--streaming", action="store_true", help="tokenize --dataset on the fly, nothing written (needs --max_steps)")
    add("--online", action="store_true", help="allow Hub downloads (default: offline, HF_HUB_OFFLINE=1)")
    add("--timings-dir", type=Path, metavar="DIR", help="each rank writes step times and peak memory here (bench)")
    return parser


def resolve_ds_config(name: str) -> Path | None:
    """A path, or the name of a bundled config; checked to be JSON with a zero_optimization stage."""
    if name == "none":
        return None
    path = Path(name)
    if not path.exists() and not path.is_absolute():
        bundled = CONFIGS_DIR / (name if name.endswith(".json") else f"{name}.json")
        if bundled.exists():
            path = bundled
    if not path.is_file():
        known = ", ".join(sorted(p.stem for p in CONFIGS_DIR.glob("*.json")))
        raise UserError(f"DeepSpeed config not found: {name} (give a JSON file or one of: {known})")
    try:
        config = json.loads(path.read_text())
    except json.JSONDecodeError as error:
        raise UserError(
            f"DeepSpeed config {path} is not valid JSON (line {error.lineno}: {error.msg}); "
            "fix the file or pick a bundled one (--config zero2|zero3|zero3-offload)"
        ) from None
    if not isinstance(config, dict):
        raise UserError(f"DeepSpeed config {path} must be a JSON object with a zero_optimization section")
    return path.resolve()


def ds_config_argument(path: Path, *, torch_adam: bool = False, load_universal: bool = False) -> str:
    """The `--deepspeed` value: the file as it is, or changed as below, as a base64 JSON string
    (a form HF's DeepSpeed config takes), so the user's file is never rewritten.

    torch_adam (`--deterministic` on CPU): Adam/AdamW run by torch. On CPU, DeepSpeed's Adam kernel
    (csrc/includes/cpu_adam.h, IncrementStep) keeps beta**step in the process by multiplying once
    per step, but a resumed process starts it with pow(beta, step): the two differ in the last
    float32 bit, so a resumed run drifts by an ulp. torch's AdamW computes the bias correction from
    the step count every time, so a resume is bit-exact. ZeRO-Offload needs DeepSpeed's CPU Adam,
    so such configs keep it.
    load_universal: resume from the checkpoint's universal form (`zerokit universal`).
    """
    config = json.loads(path.read_text())
    changed = False
    optimizer = config.get("optimizer") or {}
    offload = config.get("zero_optimization", {}).get("offload_optimizer", {}).get("device", "none")
    if torch_adam and str(optimizer.get("type", "")).lower() in {"adam", "adamw"} and offload == "none":
        config["optimizer"] = {**optimizer, "params": {**optimizer.get("params", {}), "torch_adam": True}}
        changed = True
    if load_universal:
        config["checkpoint"] = {**config.get("checkpoint", {}), "load_universal": True}
        changed = True
    return base64.urlsafe_b64encode(json.dumps(config).encode()).decode() if changed else str(path)


def check_output_dir(path: Path, overwrite: bool, resume: str | None) -> None:
    """Whether this run may write into path: never over a finished run or other files unasked.

    `--resume` writes into a folder only when there is something of this run to continue (a
    checkpoint, or a run that did not finish); a finished run with no checkpoint is not resumed
    but replaced, which needs --overwrite.
    """
    from zerokit import outputs
    from zerokit.checkpoints import newest_complete_checkpoint

    outputs.check_writable(path, "--output-dir")
    if path.exists() and not path.is_dir():
        raise UserError(f"output {path} exists and is a file: pick another --output-dir")
    if overwrite or not outputs.entries(path):
        return
    record = outputs.read_record(path)
    finished = record.finished if record else (path / "train_results.json").is_file()
    if resume is not None and (newest_complete_checkpoint(path) or (record and not finished)):
        return
    if finished:
        raise UserError(
            f"output folder {path} holds a finished run and no checkpoint to resume: pick another --output-dir, "
            "or pass --overwrite to replace that run's files"
        )
    raise UserError(
        f"output folder {path} exists and is not empty: pick another --output-dir, "
        "or pass --overwrite to write into it (files that no earlier run wrote are kept)"
    )


def parse(argv: list[str]) -> tuple[TrainOptions, list[str]]:
    """Split argv into zerokit's options (validated) and the TrainingArguments flags."""
    parser = build_parser()
    namespace, hf_argv = parser.parse_known_args(argv)
    check_hf_flags(hf_argv, [flag for action in parser._actions for flag in action.option_strings])
    if namespace.nproc_per_node < 1:
        raise UserError(f"--nproc-per-node must be at least 1, got {namespace.nproc_per_node}")
    if namespace.block_size is not None and namespace.block_size < 1:
        raise UserError(f"--block-size must be at least 1, got {namespace.block_size}")
    if not 0 <= namespace.validation_split_percentage < 100:
        percent = namespace.validation_split_percentage
        raise UserError(f"--validation-split-percentage must be from 0 to 99, got {percent}")
    options = TrainOptions(
        ds_config=resolve_ds_config(namespace.config),
        output_dir=Path(namespace.output_dir),
        overwrite=namespace.overwrite,
        model=namespace.model,
        model_type=namespace.model_type,
        from_scratch=namespace.from_scratch,
        config_overrides=namespace.config_overrides,
        tokenizer=namespace.tokenizer,
        dataset=namespace.dataset,
        text_column=namespace.text_column,
        validation_split_percentage=namespace.validation_split_percentage,
        block_size=namespace.block_size,
        nproc_per_node=namespace.nproc_per_node,
        resume=namespace.resume,
        lora=namespace.lora,
        train_last_layers=namespace.train_last_layers,
        merge=namespace.merge,
        deterministic=namespace.deterministic,
        online=namespace.online,
        streaming=namespace.streaming,
        timings_dir=namespace.timings_dir,
    )
    if options.streaming and not options.dataset:
        raise UserError("--streaming needs --dataset (the embedded corpus is small)")
    check_fine_tuning(options)
    if options.from_scratch and not options.model:
        raise UserError("--from-scratch needs --model (whose config is used); or use --model-type")
    if options.dataset:
        from zerokit.data import check_text_files, resolve_source

        check_text_files(resolve_source(options.dataset))  # a missing, empty or binary file fails now
    return options, hf_argv


def check_fine_tuning(options: TrainOptions) -> None:
    if options.train_last_layers is not None and options.train_last_layers < 1:
        raise UserError(f"--train-last-layers must be at least 1, got {options.train_last_layers}")
    if options.lora is not None:
        parse_lora(options.lora)  # a bad spec fails now, not in the ranks
        if options.train_last_layers:
            raise UserError("--lora and --train-last-layers exclude each other: pick one")
    if options.merge and (options.lora is None or not options.model or options.from_scratch):
        raise UserError("--merge needs --lora and a pretrained --model (the base the adapter is merged into)")


def check_hub_inputs(options: TrainOptions) -> None:
    """Offline (the default): Hub names must be in the cache; fail now, in one line, naming `prepare`."""
    from zerokit import offline
    from zerokit.model_source import is_path, require_model_folder, require_tokenizer_folder

    if options.model and is_path(options.model):
        require_model_folder("--model", options.model)
    if options.tokenizer and is_path(options.tokenizer):
        require_tokenizer_folder("--tokenizer", options.tokenizer)
    if options.online:
        return
    offline.go_offline(os.environ)
    if not offline.is_offline(os.environ):
        return
    if options.model:
        offline.require_cached_model(options.model)
    if options.tokenizer:
        offline.require_cached_tokenizer(options.tokenizer)
    if options.dataset:
        from zerokit.data import resolve_source

        if resolve_source(options.dataset).kind == "hub":
            offline.require_cached_dataset(options.dataset)


def main(argv: list[str]) -> int:
    options, hf_argv = parse(argv)
    # Every rank checks before the rendezvous; nothing is written to the output folder before it.
    check_output_dir(options.output_dir, options.overwrite, options.resume)
    check_hub_inputs(options)
    if options.nproc_per_node > 1:
        from zerokit.launch.cli import main as launch_main

        return launch_main(["--nproc-per-node", str(options.nproc_per_node), "train", *_without_nproc(argv)])
    return run(options, hf_argv)


def _without_nproc(argv: list[str]) -> list[str]:
    """argv minus --nproc-per-node N, so each rank does not spawn again."""
    out, skip = [], False
    for arg in argv:
        if skip:
            skip = False
        elif arg in ("--nproc-per-node", "--nproc_per_node"):
            skip = True
        elif not arg.startswith(("--nproc-per-node=", "--nproc_per_node=")):
            out.append(arg)
    return out


def run(options: TrainOptions, hf_argv: list[str]) -> int:
    """Build everything and train; called once per rank."""
    from zerokit.launch.environment import ensure_rank_env

    ensure_rank_env(os.environ)
    warnings.filterwarnings("ignore", category=FutureWarning)
    import torch
    from transformers import HfArgumentParser, TrainingArguments, default_data_collator, set_seed
    from transformers.trainer_utils import enable_full_determinism

    from zerokit.checkpoints import needs_universal_load, resolve_resume
    from zerokit.preemption import PreemptionCallback
    from zerokit.trainer import FiniteLossGuard, ZerokitTrainer

    preemption = PreemptionCallback()  # from now on SIGTERM/SIGUSR1 mean: checkpoint at the step end
    skipped: list[str] = []
    resume = resolve_resume(options.resume, options.output_dir, skipped)
    universal = bool(resume) and needs_universal_load(resume, int(os.environ["WORLD_SIZE"]))

    on_gpu = torch.cuda.is_available()
    parser = HfArgumentParser(TrainingArguments, allow_abbrev=False)
    parser.set_defaults(**TRAINING_DEFAULTS)
    if options.embedded:
        parser.set_defaults(**EMBEDDED_TRAINING_DEFAULTS)
    if on_gpu and torch.cuda.is_bf16_supported():
        parser.set_defaults(bf16=True)
    forced = ["--output_dir", str(options.output_dir)]
    if options.ds_config:
        torch_adam = options.deterministic and not on_gpu
        config = ds_config_argument(options.ds_config, torch_adam=torch_adam, load_universal=universal)
        forced += ["--deepspeed", config]
    if not on_gpu:
        forced += ["--use_cpu", "true"]
    if options.deterministic:
        forced += ["--full_determinism", "true"]
    (args,) = parser.parse_args_into_dataclasses(hf_argv + forced)
    if options.streaming and args.max_steps <= 0:
        raise UserError("--streaming has no length to plan epochs from: pass --max_steps N")
    join_process_group(args, deepspeed=options.ds_config is not None)
    record = claim_output_dir(options, resume, args.process_index)
    if args.full_determinism:
        enable_full_determinism(args.seed)
    else:
        set_seed(args.seed)

    tokenizer = load_tokenizer(options)
    model = fine_tuning(options, load_model(options, tokenizer), args)
    check_free_space(options.output_dir, model, saves_checkpoints=args.save_strategy != "no")
    datasets = load_datasets(options, tokenizer, model, args)
    callbacks = [preemption]
    if options.timings_dir:
        from zerokit.bench.clock import StepClock

        callbacks.append(StepClock(options.timings_dir, tokens_per_sample=block_length(datasets["train"])))

    trainer = ZerokitTrainer(
        loss_guard=FiniteLossGuard(),
        model=model,
        args=args,
        train_dataset=datasets["train"],
        eval_dataset=datasets["validation"],
        processing_class=tokenizer,
        data_collator=default_data_collator,
        callbacks=callbacks,
    )
    if args.process_index == 0:
        for note in skipped:
            print(f"zerokit: {note}", file=sys.stderr, flush=True)
        print(_resume_message(options, resume, universal), flush=True)
    try:
        return train_and_save(options, trainer, resume, preemption, datasets, record, on_gpu)
    except RunFailure:
        _shutdown_distributed(barrier=False)  # every rank got here, or the launcher stops the rest
        raise


def train_and_save(options: TrainOptions, trainer, resume, preemption, datasets, record, on_gpu: bool) -> int:
    import torch

    from zerokit.preemption import REQUEUE_EXIT_CODE

    args = trainer.args
    result = trainer.train(resume_from_checkpoint=str(resume) if resume else None)
    if preemption.preempted:  # the checkpoint is written; the job script requeues on this code
        _shutdown_distributed()
        return REQUEUE_EXIT_CODE
    if on_gpu:  # this rank's peak (rank 0's is the one saved); `smoke` reports it
        result.metrics["peak_gpu_memory_bytes"] = torch.cuda.max_memory_allocated()
    trainer.save_model()
    trainer.log_metrics("train", result.metrics)
    trainer.save_metrics("train", result.metrics)
    trainer.save_state()

    if datasets["validation"] is not None:  # None: streaming a source without a validation split
        evaluate(trainer)
    if options.merge and args.should_save:
        from transformers.integrations.deepspeed import unset_hf_deepspeed_config

        from zerokit.lora import merge_adapter

        unset_hf_deepspeed_config()  # the base is loaded whole, not partitioned by ZeRO-3
        merge_adapter(options.model, str(options.output_dir), str(options.output_dir / "merged"))
    if record is not None:
        from zerokit import outputs

        outputs.finish(options.output_dir, record)
    _shutdown_distributed()
    return 0


def claim_output_dir(options: TrainOptions, resume: Path | None, rank: int):
    """Rank 0 records the run in its output folder (zerokit.outputs), after every rank has checked it.

    --overwrite without --resume first removes what an earlier run wrote there (its model, its
    checkpoints), so neither rotation nor a later `--resume auto` mistakes them for this run's.
    Returns the record on rank 0, None on the others.
    """
    import torch.distributed as dist

    from zerokit import outputs

    record = None
    if rank == 0:
        outputs.hold_lock(options.output_dir, "train")
        record = outputs.begin(options.output_dir, "train", replace=options.overwrite and resume is None)
    if dist.is_available() and dist.is_initialized():
        dist.barrier()
    return record


def check_free_space(output_dir: Path, model, saves_checkpoints: bool) -> None:
    """Fail before training when the output folder's disk cannot hold the model (and a checkpoint)."""
    import shutil

    total = sum(p.numel() for p in model.parameters())
    trainable = sum(p.numel() for p in model.parameters() if p.requires_grad)
    # fp32 weights; a checkpoint adds fp32 weights and Adam's two moments of what is trained.
    needed = 4 * total + (4 * total + 8 * trainable if saves_checkpoints else 0)
    free = shutil.disk_usage(output_dir).free
    if free < needed:
        raise UserError(
            f"--output-dir {output_dir} has {free / 2**20:.0f} MiB free, and the model"
            + (" and one checkpoint need" if saves_checkpoints else " needs")
            + f" about {needed / 2**20:.0f} MiB: free space there or pick another --output-dir"
        )


def evaluate(trainer) -> None:
    metrics = trainer.evaluate()
    metrics["perplexity"] = math.exp(metrics["eval_loss"]) if metrics["eval_loss"] < 700 else math.inf
    trainer.log_metrics("eval", metrics)
    trainer.save_metrics("eval", metrics)


def _resume_message(options: TrainOptions, resume: Path | None, universal: bool) -> str:
    if resume:
        return f"zerokit: resuming from {resume}" + (" (its universal form: another rank count)" if universal else "")
    if options.resume == "auto":
        return f"zerokit: no complete checkpoint in {options.output_dir}: starting from step 0"
    return "zerokit: starting from step 0"


def fine_tuning(options: TrainOptions, model, args):
    """--lora wraps the model in adapters; --train-last-layers freezes the rest; else unchanged."""
    from zerokit.lora import apply_lora, count_parameters, parse_lora, train_last_layers

    if options.lora is not None:
        model = apply_lora(model, parse_lora(options.lora))
    elif options.train_last_layers:
        train_last_layers(model, options.train_last_layers)
    else:
        return model
    trainable, total = count_parameters(model)
    if args.process_index == 0:
        print(f"zerokit: training {trainable:,} of {total:,} parameters ({100 * trainable / total:.2f}%)", flush=True)
    return model


def join_process_group(args, deepspeed: bool) -> None:
    """Join the process group before the model is built.

    ZeRO-3 partitions the model while it is built (zero.Init) and needs the real world size
    then. TrainingArguments sets up devices lazily, and on CPU accelerate starts torch.distributed
    but not deepspeed.comm, which zero.Init asks; so both are started here.
    """
    import torch.distributed as dist

    _ = args.device  # accelerate's device and process-group setup
    if deepspeed and dist.is_initialized():
        import deepspeed as ds

        ds.init_distributed(dist_backend=dist.get_backend())


def load_tokenizer(options: TrainOptions):
    from transformers import AutoTokenizer

    if options.embedded or (options.model_type and not options.tokenizer):
        from zerokit.embedded import prepare_embedded

        _, folder = prepare_embedded(embedded_cache_dir())
        return AutoTokenizer.from_pretrained(folder)
    return AutoTokenizer.from_pretrained(options.tokenizer or options.model)


def load_model(options: TrainOptions, tokenizer):
    """from_pretrained for --model; a fresh config for the embedded default, --model-type or --from-scratch."""
    from transformers import CONFIG_MAPPING, AutoConfig, AutoModelForCausalLM

    if options.model and not options.from_scratch:
        if options.config_overrides:
            raise UserError("--config-overrides only applies when training from scratch: add --from-scratch")
        return AutoModelForCausalLM.from_pretrained(options.model)
    if options.model:
        config = AutoConfig.from_pretrained(options.model)
    elif options.model_type:
        if options.model_type not in CONFIG_MAPPING:
            raise UserError(f"unknown --model-type {options.model_type!r}; e.g. gpt2, llama, mistral, qwen2")
        config = CONFIG_MAPPING[options.model_type]()
    else:
        from zerokit.embedded import model_config

        config = model_config()
    fit_to_tokenizer(config, tokenizer)
    if options.config_overrides:
        try:
            config.update_from_string(options.config_overrides)
        except ValueError as error:
            raise UserError(
                f"--config-overrides {options.config_overrides!r}: {error}; "
                'format: "key=value,key=value" with keys of the model config'
            ) from None
    return AutoModelForCausalLM.from_config(config)


def fit_to_tokenizer(config, tokenizer):
    """A from-scratch config's vocabulary size and special tokens, from the tokenizer it trains with."""
    config.vocab_size = len(tokenizer)
    config.bos_token_id = config.eos_token_id = tokenizer.eos_token_id
    config.pad_token_id = tokenizer.pad_token_id
    return config


def pick_block_size(options: TrainOptions, tokenizer, model, wanted: int | None = None) -> int:
    model_max = getattr(model.config, "max_position_embeddings", None) or getattr(model.config, "n_positions", 1024)
    wanted = wanted or options.block_size
    if wanted:
        if wanted > model_max:
            raise UserError(f"block size {wanted} exceeds the model's maximum {model_max}")
        return wanted
    return min(model_max, tokenizer.model_max_length, 1024)


def block_length(blocks) -> int:
    """Tokens in each training block (every block has the same length)."""
    return len(next(iter(blocks))["input_ids"])


def load_datasets(options: TrainOptions, tokenizer, model, args):
    """train/validation blocks: memory-mapped when `prepare tokenize` made them, else tokenized here."""
    from zerokit.data import resolve_source

    if options.dataset and resolve_source(options.dataset).kind == "prepared":
        return load_prepared(options, tokenizer, model, args.process_index)
    block_size = pick_block_size(options, tokenizer, model)
    with args.main_process_first(desc="dataset"):
        blocks = tokenize_datasets(options, tokenizer, block_size, args.seed)
    if not options.streaming:
        from zerokit.data import check_blocks

        check_blocks(blocks, options.dataset or "embedded", block_size)
    return blocks


def load_prepared(options: TrainOptions, tokenizer, model, rank: int):
    import datasets

    from zerokit.prepare.pack import read_prepared

    info = read_prepared(Path(options.dataset))
    if info["vocab_size"] != len(tokenizer):
        raise UserError(
            f"dataset {options.dataset} was tokenized with {info['tokenizer']} ({info['vocab_size']} tokens), "
            f"not this run's tokenizer ({len(tokenizer)} tokens): run `prepare tokenize` again with --tokenizer"
        )
    if options.block_size and options.block_size != info["block_size"]:
        raise UserError(
            f"--block-size {options.block_size}, but {options.dataset} holds blocks of {info['block_size']}: "
            "drop --block-size, or run `prepare tokenize` again"
        )
    pick_block_size(options, tokenizer, model, info["block_size"])  # within the model's maximum
    blocks = datasets.load_from_disk(options.dataset)  # memory-mapped Arrow files: nothing is tokenized
    print(
        f"zerokit: rank {rank}: dataset {options.dataset} is pre-tokenized ({len(blocks['train'])} blocks of "
        f"{info['block_size']} tokens): memory-mapped, no tokenization",
        flush=True,
    )
    return blocks


def tokenize_datasets(options: TrainOptions, tokenizer, block_size: int, seed: int):
    from zerokit.data import DatasetSource, load_raw, resolve_source, stream_blocks, tokenize_and_group

    if options.streaming:
        print(f"zerokit: streaming {options.dataset}: tokenized while training, nothing written", flush=True)
        return stream_blocks(resolve_source(options.dataset), tokenizer, options.text_column, block_size)
    if options.dataset:
        raw = load_raw(resolve_source(options.dataset), options.validation_split_percentage, seed)
    else:
        from zerokit.embedded import prepare_embedded

        files, _ = prepare_embedded(embedded_cache_dir())
        raw = load_raw(
            DatasetSource(kind="files", location="embedded"), 0, seed, splits={k: str(v) for k, v in files.items()}
        )
    return tokenize_and_group(raw, tokenizer, options.text_column, block_size)


def embedded_cache_dir() -> Path:
    """Where the embedded corpus and tokenizer are made: `$ZEROKIT_CACHE`, else ~/.cache/zerokit."""
    return Path(os.environ.get("ZEROKIT_CACHE", Path.home() / ".cache" / "zerokit")) / "embedded"


def _shutdown_distributed(barrier: bool = True) -> None:
    """Leave the process group cleanly; gloo aborts at exit under MPI otherwise."""
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        if barrier:
            dist.barrier()
        dist.destroy_process_group()
