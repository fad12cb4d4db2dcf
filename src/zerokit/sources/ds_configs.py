"""DeepSpeed configs by name: a JSON file's path, or one bundled in configs/ (zero1, zero2, zero3, zero3-offload).

The one lookup `train`, `bench` and `doctor --against` share, so a name means the same file to each.
"""

from __future__ import annotations

import json
from pathlib import Path

from zerokit.foundations.errors import UserError
from zerokit.foundations.paths import CONFIGS_DIR
from zerokit.foundations.utf8 import bad_byte, iconv_fix

__all__ = [
    "CONFIGS_DIR",
    "DEFAULT_CONFIG",
    "bundled",
    "find_ds_config",
    "is_bundled",
    "read_ds_config",
    "resolve_ds_config",
]

# train's --config when none is given (launch reads it too, to name the ops a train job needs).
DEFAULT_CONFIG = "zero2"


def bundled(name: str) -> Path:
    """Where configs/ would hold a bundled config of this name (zero3 -> configs/zero3.json)."""
    return CONFIGS_DIR / (name if name.endswith(".json") else f"{name}.json")


def find_ds_config(name: str) -> Path | None:
    """The file a --config value names (a path, or the name of a bundled config), as found, not yet read; None for
    none."""
    if name == "none":
        return None
    path = Path(name)
    if not path.exists() and not path.is_absolute() and bundled(name).exists():
        path = bundled(name)
    if not path.is_file():
        known = ", ".join(sorted(p.stem for p in CONFIGS_DIR.glob("*.json")))
        raise UserError(f"DeepSpeed config not found: {name} (give a JSON file or one of: {known})")
    return path


def resolve_ds_config(name: str) -> Path | None:
    """A path, or the name of a bundled config; checked to be JSON with a zero_optimization stage."""
    path = find_ds_config(name)
    if path is None:
        return None
    read_ds_config(path)
    return path.resolve()


def is_bundled(path: Path) -> bool:
    """Whether path is one of configs/ (checked against DeepSpeed by zerokit's tests, not at each start)."""
    return path.resolve().parent == CONFIGS_DIR.resolve()


def zero_stage(config: dict) -> int:
    """The ZeRO stage a DeepSpeed config asks for (0 where it names none)."""
    return (config.get("zero_optimization") or {}).get("stage", 0)


def read_ds_config(path: Path) -> dict:
    """The config in path; a file that is not UTF-8 JSON holding one object is refused in one line."""
    data = path.read_bytes()
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as error:
        raise UserError(
            f"DeepSpeed config {path} is not UTF-8 at {bad_byte(data, error.start)}: {iconv_fix(path)}"
        ) from None
    if text.startswith("\ufeff"):  # DeepSpeed's and the Trainer's json.load refuse it on every rank
        raise UserError(
            f"DeepSpeed config {path} starts with a byte-order mark (a Windows editor's UTF-8 with BOM): save it as "
            f"UTF-8 without one (sed -i '1s/^\\xEF\\xBB\\xBF//' {path})"
        )
    try:
        config = json.loads(text)
    except json.JSONDecodeError as error:
        raise UserError(
            f"DeepSpeed config {path} is not valid JSON (line {error.lineno}: {error.msg}); "
            "fix the file or pick a bundled one (--config zero1|zero2|zero3|zero3-offload)"
        ) from None
    except (ValueError, RecursionError) as error:  # a number past Python's digit limit; arrays nested too deep
        raise UserError(f"DeepSpeed config {path} cannot be read as JSON ({error}): fix the file") from None
    if not isinstance(config, dict):
        raise UserError(f"DeepSpeed config {path} must be a JSON object with a zero_optimization section")
    return config
