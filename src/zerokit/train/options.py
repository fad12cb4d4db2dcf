"""What a training run is: zerokit's own options, the TrainingArguments defaults, the DeepSpeed config."""

from __future__ import annotations

import base64
import json
from collections.abc import Sequence
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path

from zerokit.foundations import values
from zerokit.foundations.errors import UserError
from zerokit.foundations.flags import flag
from zerokit.sources.ds_configs import CONFIGS_DIR, DEFAULT_CONFIG, find_ds_config
from zerokit.train.ds_settings import DeepSpeedSettings

COMPILE_MODES = ("off", "torch", "deepcompile")
CROSS_ENTROPY_KINDS = ("hf", "chunked", "liger")
LORA_FORMAT = '"r=8,alpha=16,dropout=0.05,targets=q_proj,v_proj" (every key optional)'
MICRO_BATCH_AUTO = "auto"  # --micro-batch's one value (zerokit.train.sizing.micro_batch)
CHECKPOINT_WRITES = ("background", "sync")  # zerokit.train.checkpoints.writer.MODES
DETERMINISTIC_BUCKET = 20_000_000  # ZeRO-1/2 bucket elements under --deterministic on CPU (ds_config_argument)

# Where `train`'s TrainingArguments differ from Hugging Face's, and why; every other field keeps HF's
# default and meaning. `train --help` and docs/train.md list these (a unit test keeps them in step).
HF_DIFFERENCES: tuple[tuple[str, str], ...] = (
    ("--deepspeed", "set from --config (default zero2; --config none trains without DeepSpeed)"),
    ("--output_dir", "--output-dir, default runs/train"),
    ("--use_cpu", "set where no GPU is visible, so CPU ranks train as one job"),
    ("--bf16", "on by default on GPUs that support bf16 (--bf16 false turns it off; not beside --fp16 true)"),
    ("--full_determinism", "set by --deterministic"),
    (
        "--logging_nan_inf_filter",
        "off: HF's reads each step's loss on the host (a device sync a step); train stops a NaN/inf loss itself, "
        "before it saves",
    ),
)

# The embedded default job's (tiny model, generated corpus, sized for a 2-core CPU): a flag wins.
EMBEDDED_TRAINING_DEFAULTS = {
    "learning_rate": 3e-3,
    "warmup_steps": 20,
    "max_steps": 300,
    "per_device_train_batch_size": 16,
    "per_device_eval_batch_size": 32,
    "weight_decay": 0.01,
    "logging_steps": 10,
    "save_strategy": "no",
    "ddp_find_unused_parameters": False,
}
EMBEDDED_DIFFERENCE = (
    "the embedded default model (no --model or --model-type) also trains 300 steps at lr 3e-3, "
    "logs every 10 steps and saves no checkpoint unless --save_steps or --save_strategy asks"
)


def given_fields(training_flags: Sequence[str]) -> set[str]:
    """The TrainingArguments fields that training_flags set, however spelt (`--save_steps N`, `--save-steps=N`)."""
    return {token[2:].partition("=")[0].replace("-", "_") for token in training_flags if token.startswith("--")}


def training_defaults(embedded: bool, training_flags: Sequence[str]) -> dict[str, object]:
    """The TrainingArguments defaults of one run: HF's, but for the embedded job's."""
    if not embedded:
        return {}
    defaults = dict(EMBEDDED_TRAINING_DEFAULTS)
    if "save_steps" in given_fields(training_flags):  # `--save_steps N` alone saves every N steps, as in HF
        del defaults["save_strategy"]
    return defaults


def micro_batch_value(name: str, value: str) -> str:
    """--micro-batch's value: auto (a number is HF's flag, named in the error)."""
    if value != MICRO_BATCH_AUTO:
        raise UserError(
            f"{name}={value!r}: the one value is auto (the largest micro-batch that fits); a fixed micro-batch is "
            f"--per_device_train_batch_size {value if value.isdigit() else 'N'}"
        )
    return value


@dataclass(frozen=True)
class TrainFlags:
    """zerokit's own `train` flags, each defined once here (zerokit.foundations.flags); the TrainingArguments ones
    are kept apart and go to Hugging Face."""

    config: str = flag(
        "--config",
        default=DEFAULT_CONFIG,
        help="DeepSpeed config: a JSON path or a bundled name "
        f"({', '.join(sorted(p.stem for p in CONFIGS_DIR.glob('*.json')))}); 'none' trains without DeepSpeed",
    )
    output_dir: Path = flag(
        "--output-dir",
        "--output_dir",
        default=Path("runs/train"),
        check=values.folder_path,
        help="where the model and results go",
    )
    overwrite: bool = flag(
        "--overwrite",
        default=False,
        action="store_true",
        help="write into an output folder that is not empty; an earlier run's files there are replaced, others kept",
    )
    model: str | None = flag("--model", help="Hub id or local folder, loaded with from_pretrained")
    model_type: str | None = flag(
        "--model-type", help="train from scratch from a fresh config of this type (e.g. gpt2, llama)"
    )
    from_scratch: bool = flag(
        "--from-scratch", default=False, action="store_true", help="take only the config of --model; random weights"
    )
    config_overrides: str | None = flag(
        "--config-overrides", help='config changes for training from scratch, e.g. "n_layer=4,n_embd=128"'
    )
    tokenizer: str | None = flag("--tokenizer", help="tokenizer Hub id or folder (default: the model's)")
    dataset: str | None = flag(
        "--dataset",
        help="a .txt/.jsonl/.csv file, a folder of such files (one kind), a save_to_disk folder or a Hub name",
    )
    text_column: str = flag("--text-column", default="text", help="column holding the text in jsonl/csv/Arrow data")
    validation_split_percentage: int = flag(
        "--validation-split-percentage",
        default=5,
        check=values.percent_below_100,
        help="eval split taken from train when none exists",
    )
    block_size: int | None = flag(
        "--block-size",
        check=values.tokens_per_block,
        help="tokens per training sequence (default: the model's maximum, at most 1024)",
    )
    # Not from ZEROKIT_NPROC_PER_NODE: that is launch's, and every rank that launch starts would spawn again.
    nproc_per_node: int = flag(
        "--nproc-per-node",
        default=1,
        check=values.count,
        env=False,
        help="start this many local ranks (CPU cores or GPUs)",
    )
    tp_size: int = flag(
        "--tp-size",
        default=1,
        check=values.count,
        metavar="N",
        help="tensor parallelism: DeepSpeed AutoTP splits the model over groups of N ranks (within a node); "
        "the world / N groups are ZeRO's data-parallel ranks (ZeRO 0-2)",
    )
    pp_size: int | None = flag(
        "--pp-size",
        check=values.count,
        metavar="N",
        help="pipeline parallelism: the model cut into N stages, trained by DeepSpeed's pipeline engine with ZeRO-1 "
        "data parallelism over the world / N replicas (Llama family and GPT-2; --config zero1)",
    )
    sp_size: int = flag(
        "--sp-size",
        default=1,
        check=values.count,
        metavar="N",
        help="sequence parallelism: DeepSpeed Ulysses splits each block's tokens over groups of N ranks (each holds "
        "1/N of the activations; the N ranks share a batch); the world / N groups are data-parallel (ZeRO 1-3)",
    )
    resume: str | None = flag(
        "--resume", metavar="auto|PATH", help="resume from a checkpoint; auto: the newest complete one, if any"
    )
    lora: str | None = flag(
        "--lora", nargs="?", const="", metavar="SPEC", help=f"train LoRA adapters (peft): {LORA_FORMAT}"
    )
    train_last_layers: int | None = flag(
        "--train-last-layers", check=values.count, metavar="N", help="train only the last N transformer layers"
    )
    merge: bool = flag(
        "--merge",
        default=False,
        action="store_true",
        help="with --lora: also write the base with the adapter merged into merged/",
    )
    deterministic: bool = flag(
        "--deterministic",
        default=False,
        action="store_true",
        help="full_determinism and, on CPU, torch's Adam: bit-exact resumes",
    )
    streaming: bool = flag(
        "--streaming",
        default=False,
        action="store_true",
        help="tokenize --dataset on the fly, nothing written (needs --max_steps)",
    )
    online: bool = flag(
        "--online", default=False, action="store_true", help="allow Hub downloads (default: offline, HF_HUB_OFFLINE=1)"
    )
    compile: str = flag(
        "--compile",
        choices=COMPILE_MODES,
        default="off",
        help="torch: torch.compile the model (HF's torch_compile; under DeepSpeed its engine.compile()); "
        "deepcompile: DeepSpeed's compiler passes too (the config's compile.deepcompile); off (default): eager",
    )
    attn_implementation: str | None = flag(
        "--attn-implementation",
        metavar="NAME",
        help="the model's attention kernel: sdpa (PyTorch's fused attention, transformers' default), eager, "
        "flash_attention_2 or _3 (needs flash-attn), flex_attention",
    )
    cross_entropy: str = flag(
        "--cross-entropy",
        choices=CROSS_ENTROPY_KINDS,
        default="hf",
        help="the loss: hf (default: full logits, upcast to fp32), chunked (never builds the whole vocabulary's "
        "logits; any device), liger (the same as a Triton kernel; GPUs, needs liger-kernel); not with ZeRO-3",
    )
    dropout: float | None = flag(
        "--dropout",
        check=values.probability,
        metavar="P",
        help="every dropout rate of the model's config (GPT-2's resid/embd/attn_pdrop, Llama's attention_dropout, "
        "...); 0 for pretraining from scratch, as llm.c and nanoGPT do (default: the config's own)",
    )
    micro_batch: str | None = flag(
        "--micro-batch",
        check=micro_batch_value,
        metavar=MICRO_BATCH_AUTO,
        help="auto: the largest per-device micro-batch that fits, from the memory estimate and, on a GPU, one real "
        "forward and backward halved until it fits (on CPU ranks the estimate alone); said in one line and recorded "
        "in zerokit-run.json; a DeepSpeed config's fixed train_batch_size is kept. A fixed micro-batch is HF's "
        "--per_device_train_batch_size N",
    )
    verbose: bool = flag(
        "--verbose",
        default=False,
        action="store_true",
        help="keep the libraries' start-up lines that mislead (DeepSpeed's 'op built successfully' for a prebuilt op)",
    )
    timings_dir: Path | None = flag(
        "--timings-dir", type=Path, metavar="DIR", help="each rank writes step times and peak memory here (bench)"
    )
    checkpoint_write: str = flag(
        "--checkpoint-write",
        choices=CHECKPOINT_WRITES,
        default="background",
        help="background (default): a save copies the state to host memory (one checkpoint's worth, kept) and "
        "training goes on while a thread writes it; sync: training waits for the write. Either way a checkpoint "
        "is published (--resume auto takes it) only once every rank's files are on disk",
    )
    memory_checkpoints: int | None = flag(
        "--memory-checkpoints",
        check=values.count,
        metavar="K",
        help="every K steps, a checkpoint in host memory: each node's in its own, and a copy in the next node's "
        "(a ring over the job's nodes). When launch --max-restarts restarts the job after a fault, it resumes from "
        "the copies the surviving nodes hold where they are newer than the disk's checkpoint and whole, losing at "
        "most K steps (zerokit-run.json's memory_recovery says which). Needs --checkpoint-write background",
    )
    memory_checkpoint_dir: Path | None = flag(
        "--memory-checkpoint-dir",
        type=Path,
        metavar="DIR",
        help="where a node keeps the memory checkpoints: a tmpfs (default: /dev/shm/zerokit-memory-checkpoints)",
    )

    @cached_property
    def ds_settings(self) -> DeepSpeedSettings | None:
        """The DeepSpeed config, found and read once (None for --config none): what every part of the run asks."""
        found = find_ds_config(self.config)
        return None if found is None else DeepSpeedSettings.read(found)

    @property
    def ds_config(self) -> Path | None:
        """The DeepSpeed config's file (the record's path: for messages and DeepSpeed's own check), or None."""
        return self.ds_settings.path if self.ds_settings else None

    @property
    def embedded(self) -> bool:
        return self.model is None and self.model_type is None


def ds_config_argument(
    settings: DeepSpeedSettings,
    *,
    deterministic_cpu: bool = False,
    load_universal: bool = False,
    tp_size: int = 1,
    deepcompile: bool = False,
) -> str:
    """The `--deepspeed` value: the file as it is, or changed as below, as a base64 JSON string
    (a form HF's DeepSpeed config takes), so the user's file is never rewritten.

    deterministic_cpu (`--deterministic` on CPU):
    - Adam/AdamW run by torch. On CPU, DeepSpeed's Adam kernel (csrc/includes/cpu_adam.h, IncrementStep)
      keeps beta**step in the process by multiplying once per step, but a resumed process starts it with
      pow(beta, step): the two differ in the last float32 bit, so a resumed run drifts by an ulp. torch's
      AdamW computes the bias correction from the step count every time, so a resume is bit-exact.
      ZeRO-Offload needs DeepSpeed's CPU Adam, so such configs keep it.
    - ZeRO-1/2's gradient buckets at most DETERMINISTIC_BUCKET elements. Deterministic torch fills every
      new tensor (torch.utils.deterministic.fill_uninitialized_memory), and ZeRO-1/2 allocates its buckets
      anew at each micro-step (two with overlap_comm): at the bundled 5e8, 4 GB filled a step, 3-4 s on
      CPU ranks. A bucket's size groups the gradients for their reduction, it changes no value
      (tests/e2e/test_train_zero.py: the same losses to the bit).
    load_universal: resume from the checkpoint's universal form (`zerokit universal`).
    deepcompile (`--compile deepcompile`): DeepSpeed's compiler passes (`"compile": {"deepcompile": true}`).
    tp_size above 1 (`--tp-size`): DeepSpeed AutoTP in groups of tp_size ranks, and the model gathered
    whole at save (stage3_gather_16bit_weights_on_model_save, which DeepSpeed reads under TP at any ZeRO
    stage), so the output folder holds one model.safetensors, not one shard per rank.
    """
    config = settings.as_dict()
    changed = False
    adam = (settings.optimizer or "").lower() in {"adam", "adamw"}
    if deterministic_cpu and adam and settings.offload_optimizer == "none":
        optimizer = config["optimizer"]
        config["optimizer"] = {**optimizer, "params": {**optimizer.get("params", {}), "torch_adam": True}}
        changed = True
    capped = {
        key: DETERMINISTIC_BUCKET
        for key, size in settings.bucket_sizes.items()
        if isinstance(size, (int, float)) and size > DETERMINISTIC_BUCKET
    }
    if deterministic_cpu and settings.zero_stage in (1, 2) and capped:
        config["zero_optimization"] = {**config["zero_optimization"], **capped}
        changed = True
    if tp_size > 1:
        config["tensor_parallel"] = {**config.get("tensor_parallel", {}), "autotp_size": tp_size}
        gather = {"stage3_gather_16bit_weights_on_model_save": True}
        config["zero_optimization"] = {**config.get("zero_optimization", {}), **gather}
        changed = True
    if deepcompile:
        config["compile"] = {**config.get("compile", {}), "deepcompile": True}
        changed = True
    if load_universal:
        config["checkpoint"] = {**config.get("checkpoint", {}), "load_universal": True}
        changed = True
    return base64.urlsafe_b64encode(json.dumps(config).encode()).decode() if changed else str(settings.path)
