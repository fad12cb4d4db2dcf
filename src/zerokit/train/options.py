"""What a training run is: zerokit's own options, the TrainingArguments defaults, the DeepSpeed config."""

from __future__ import annotations

import base64
import json
from dataclasses import dataclass
from pathlib import Path

from zerokit.errors import UserError
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
