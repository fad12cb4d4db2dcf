"""The TrainingArguments flags `train` passes on to Hugging Face, checked before torch is imported.

HfArgumentParser would catch a misspelt flag only in the ranks, after torch and transformers
have loaded (seconds, once per rank), and argparse takes a prefix (`--learning_rat`) for the
whole flag. Here the field names are read from transformers' source (its `TrainingArguments`
dataclass, parsed, not imported), so an unknown flag fails at once with the nearest name, and
numbers that make no sense fail with what they must be.
"""

from __future__ import annotations

import ast
import difflib
import importlib.util
from functools import cache
from pathlib import Path

from zerokit.foundations.errors import UserError

# flag -> (the smallest value that makes sense, what it must be). HF reads max_steps <= 0 as
# "train num_train_epochs instead", so `--max_steps -5` would silently train for epochs.
LOWER_BOUNDS: dict[str, tuple[float, str]] = {
    "max_steps": (1, "at least 1 (leave it out to train --num_train_epochs)"),
    "num_train_epochs": (1e-9, "positive"),
    "per_device_train_batch_size": (1, "at least 1"),
    "per_device_eval_batch_size": (1, "at least 1"),
    "gradient_accumulation_steps": (1, "at least 1"),
    "learning_rate": (0, "zero or more"),
    "warmup_steps": (0, "zero or more"),
    "weight_decay": (0, "zero or more"),
    "max_grad_norm": (0, "zero or more"),
    "logging_steps": (1e-9, "positive"),
    "save_steps": (1e-9, "positive"),
    "eval_steps": (1e-9, "positive"),
    "save_total_limit": (1, "at least 1 (leave it out to keep every checkpoint)"),
    "seed": (0, "zero or more"),
    "dataloader_num_workers": (0, "zero or more (0: the data loads in the rank itself)"),
}


# TrainingArguments fields that train sets from its own flags: given directly, they would be overridden.
SET_BY_ZEROKIT = {
    "deepspeed": "give the DeepSpeed config with --config FILE (or zero1, zero2, zero3, zero3-offload, none)",
    "full_determinism": "pass --deterministic (it also makes resumes bit-exact on CPU)",
}


@cache
def training_argument_names() -> frozenset[str]:
    """Field names of transformers' TrainingArguments, read from its source file."""
    spec = importlib.util.find_spec("transformers")
    if spec is None or not spec.submodule_search_locations:
        raise UserError("transformers is not installed in this Python: use the image or `make venv`")
    source = Path(next(iter(spec.submodule_search_locations))) / "training_args.py"
    tree = ast.parse(source.read_text())
    cls = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "TrainingArguments")
    return frozenset(n.target.id for n in cls.body if isinstance(n, ast.AnnAssign) and isinstance(n.target, ast.Name))


def check_hf_flags(argv: list[str], own_flags: list[str]) -> None:
    """Refuse unknown flags (with the nearest known one) and nonsensical numbers."""
    names = training_argument_names()
    for index, token in enumerate(argv):
        if not token.startswith("--"):
            continue
        flag, _, inline = token[2:].partition("=")
        name = flag.replace("-", "_")
        if name not in names and not (name.startswith("no_") and name[3:] in names):
            raise UserError(unknown_flag_message(token.split("=")[0], names, own_flags))
        if name in SET_BY_ZEROKIT:
            raise UserError(f"--{flag} is set by train itself: {SET_BY_ZEROKIT[name]}")
        if name in LOWER_BOUNDS:
            value = inline or (argv[index + 1] if index + 1 < len(argv) else "")
            check_bound(f"--{flag}", value, *LOWER_BOUNDS[name])


def unknown_flag_message(flag: str, names: frozenset[str], own_flags: list[str]) -> str:
    # A name as the user would type it: HF's with underscores, zerokit's own as spelled (--block-size).
    spelled = {f.lstrip("-").replace("-", "_"): f for f in own_flags if f.startswith("--")}
    known = sorted(names | set(spelled))
    close = difflib.get_close_matches(flag.lstrip("-").replace("-", "_"), known, n=1)
    hint = f"did you mean {spelled.get(close[0], '--' + close[0])}? " if close else ""
    return f"unknown flag {flag}: {hint}(`train --help` lists zerokit's flags; every TrainingArguments field is one)"


def check_bound(flag: str, value: str, lowest: float, must_be: str) -> None:
    try:
        number = float(value)
    except ValueError:
        raise UserError(f"{flag} {value!r} is not a number") from None
    if number < lowest:
        raise UserError(f"{flag} {value}: must be {must_be}")
