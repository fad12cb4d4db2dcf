"""A resume's checkpoint against the run that resumes it: the same model, in the same precision.

A checkpoint loads only into the model that wrote it: another architecture, another vocabulary or other layer
shapes fail deep in DeepSpeed's load_state_dict, after every rank has started, with a wall of missing and
unexpected keys. So a resume compares first, from the checkpoint's config.json and its zerokit-run.json (never its
weights), before the output folder is claimed: a mismatch is one line naming both sides and the ways on, and the
folder is left as it was. The tensor-parallel and pipeline layouts are checked by zerokit.outputs.checkpoints
(needs_universal_load, check_pipeline_resume), the global batch by zerokit.train.sizing.global_batch.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path

from zerokit.foundations.errors import UserError
from zerokit.image.provenance import RECORD_NAME

# The sizes a model's weights have, each under the config keys its model families spell it with.
SHAPES: dict[str, tuple[str, ...]] = {
    "vocabulary size": ("vocab_size",),
    "hidden size": ("hidden_size", "n_embd", "d_model"),
    "layer count": ("num_hidden_layers", "n_layer", "num_layers"),
    "attention heads": ("num_attention_heads", "n_head"),
    "key-value heads": ("num_key_value_heads",),
    "intermediate size": ("intermediate_size", "n_inner", "ffn_dim"),
}
# What a run passes to train in each precision (bf16 is on by default on GPUs that have it).
PRECISION_FLAGS = {"bf16": "--bf16 true", "fp16": "--fp16 true --bf16 false", "fp32": "--bf16 false"}
ELSEWHERE = "or train this run into another --output-dir, or replace the folder's run: --overwrite without --resume"


class ResumeMismatch(UserError):
    """A checkpoint of another model or precision: every rank finds the same, rank 0 says it."""

    every_rank = True


def precision(args) -> str:
    """The precision a run trains in, from its TrainingArguments: bf16, fp16 or fp32."""
    return "bf16" if args.bf16 else "fp16" if args.fp16 else "fp32"


def model_difference(saved: Mapping, config: Mapping) -> str | None:
    """How the checkpoint's model config (saved) differs from this run's (config), both as dicts: said as "a gpt2
    model ..., this run's ..." for the error; None where the checkpoint's weights fit this run's model."""
    kind, run_kind = saved.get("model_type"), config.get("model_type")
    classes, run_classes = saved.get("architectures"), config.get("architectures")
    if kind != run_kind or (classes and run_classes and classes != run_classes):
        return f"a {described(kind, classes)} model, this run's is a {described(run_kind, run_classes)} model"
    differing = [
        (name, size(saved, keys), size(config, keys))
        for name, keys in SHAPES.items()
        if size(saved, keys) != size(config, keys)
    ]
    if not differing:
        return None
    theirs = ", ".join(f"{name} {was}" for name, was, _ in differing)
    ours = ", ".join(f"{name} {now}" for name, _, now in differing)
    return f"a {kind} model of {theirs}, this run's has {ours}"


def described(kind: object, classes: list[str] | None) -> str:
    return f"{kind} ({', '.join(classes)})" if classes else str(kind)


def size(config: Mapping, keys: tuple[str, ...]) -> object:
    """The first of keys that config has (a model family spells each size its own way); None if none."""
    return next((config[key] for key in keys if key in config), None)


def saved_precision(record: Mapping) -> str | None:
    """The precision a checkpoint's run trained in, from its zerokit-run.json: as recorded, or (a record from before
    zerokit recorded it) as its DeepSpeed config resolved it; None where the record says neither."""
    if record.get("precision"):
        return str(record["precision"])
    resolved = (record.get("deepspeed") or {}).get("resolved")
    if not resolved:
        return None
    on = [name for name in ("bf16", "fp16") if (resolved.get(name) or {}).get("enabled") is True]
    return on[0] if on else "fp32"


def check_resume_match(checkpoint: Path, config: Mapping, run_precision: str) -> None:
    """Whether this run (its model config as a dict, its precision) can resume checkpoint; one line if not. What
    the checkpoint does not record (no config.json, no zerokit-run.json) is not compared."""
    saved = read_json(checkpoint / "config.json")
    if saved is not None and (difference := model_difference(saved, config)):
        raise ResumeMismatch(
            f"checkpoint {checkpoint} holds {difference}: resume it with the model that wrote it (the --model or "
            f"--model-type in its {RECORD_NAME}'s argv; neither for the embedded model), {ELSEWHERE}"
        )
    was = saved_precision(read_json(checkpoint / RECORD_NAME) or {})
    if was is not None and was != run_precision:
        raise ResumeMismatch(
            f"checkpoint {checkpoint} was trained in {was}, this run trains in {run_precision}: resume it in {was} "
            f"({PRECISION_FLAGS[was]}), {ELSEWHERE}"
        )


def read_json(path: Path) -> dict | None:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None
