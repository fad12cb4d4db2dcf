"""The DeepSpeed config keys whose "auto" Hugging Face's Trainer fills, read from transformers' source (parsed, not
imported): each key `HfTrainerDeepSpeedConfig` passes to `fill_match` or `fill_only` (trainer_config_process, from
TrainingArguments; trainer_config_finalize, from the model and the step count). An "auto" anywhere else reaches
DeepSpeed as the string "auto": its models drop it for their default, its other readers fail on it at start.
"""

from __future__ import annotations

import ast
import importlib.util
from functools import cache
from pathlib import Path

from zerokit.foundations.errors import UserError

FILLERS = ("fill_match", "fill_only")
FILLING_CLASS = "HfTrainerDeepSpeedConfig"


@cache
def hf_filled_keys() -> frozenset[str]:
    """Dotted keys ("optimizer.params.lr") whose "auto" the Trainer replaces with a value."""
    spec = importlib.util.find_spec("transformers")
    if spec is None or not spec.submodule_search_locations:
        raise UserError("transformers is not installed in this Python: use the image or `make venv`")
    source = Path(next(iter(spec.submodule_search_locations))) / "integrations" / "deepspeed.py"
    tree = ast.parse(source.read_text(encoding="utf-8"))
    filling = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == FILLING_CLASS)
    return frozenset(
        call.args[0].value
        for call in ast.walk(filling)
        if isinstance(call, ast.Call)
        and isinstance(call.func, ast.Attribute)
        and call.func.attr in FILLERS
        and call.args
        and isinstance(call.args[0], ast.Constant)
        and isinstance(call.args[0].value, str)
    )
