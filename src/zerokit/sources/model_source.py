"""`--model`/`--tokenizer` values: a local folder or a Hub id, told apart before anything loads.

Hugging Face takes an existing folder first and anything else as a Hub id, so a mistyped path
becomes a Hub lookup, and offline the user is told to stage a "model" that is only a typo. Here a
value that can only be a path (absolute, `./`, `../`, `~`, or more than one `/`) must be a folder
holding what the loader needs; one line otherwise.
"""

from __future__ import annotations

from pathlib import Path

from zerokit.foundations.errors import UserError
from zerokit.sources.hub_cache import TOKENIZER_FILES

# What save_pretrained writes as a model's (or a LoRA adapter's) weights.
WEIGHT_FILES = (
    "model.safetensors",
    "model.safetensors.index.json",
    "pytorch_model.bin",
    "pytorch_model.bin.index.json",
    "adapter_model.safetensors",
    "adapter_model.bin",
)


def is_path(name: str) -> bool:
    """Whether name can only mean a local path (a Hub id is `name` or `org/name`)."""
    return name.startswith(("/", "./", "../", "~", ".")) or name.count("/") > 1 or Path(name).expanduser().exists()


def require_model_folder(flag: str, name: str) -> None:
    """A path given as a model must be a folder with config.json (what save_pretrained writes)."""
    _require_folder(flag, name)
    folder = Path(name).expanduser()
    if not (folder / "config.json").is_file() and not (folder / "adapter_config.json").is_file():
        found = ", ".join(sorted(p.name for p in folder.iterdir())[:5]) or "nothing"
        raise UserError(
            f"{flag} {name}: the folder holds no config.json (it has {found}): give a folder that "
            "save_pretrained or train wrote"
        )


def require_weights(flag: str, name: str) -> None:
    """A model folder to start from must hold weights: transformers 5 builds a model of fresh weights from a
    config alone (a warning among many), and the run fine-tunes noise."""
    folder = Path(name).expanduser()
    if any((folder / file).is_file() for file in WEIGHT_FILES) or any(folder.glob("*.safetensors")):
        return
    raise UserError(
        f"{flag} {name}: the folder holds a config but no weights ({', '.join(WEIGHT_FILES[:2])}, ...): give the "
        "folder save_pretrained wrote, or add --from-scratch to train that config from fresh weights"
    )


def require_tokenizer_folder(flag: str, name: str, fix: str = "") -> None:
    """A path that the tokenizer is loaded from must hold tokenizer files: from a folder without them,
    transformers 5 builds a default tokenizer of a single token, and training goes on with it."""
    _require_folder(flag, name)
    folder = Path(name).expanduser()
    if not any((folder / file).is_file() for file in TOKENIZER_FILES):
        fix = fix or "give the folder a tokenizer was saved to (save_pretrained), or a model folder that holds one"
        raise UserError(f"{flag} {name}: no tokenizer files in it ({', '.join(TOKENIZER_FILES[:2])}, ...): {fix}")


def _require_folder(flag: str, name: str) -> None:
    path = Path(name).expanduser()
    if not path.exists():
        raise UserError(f"{flag} {name}: no such folder (a local path; a Hub id looks like org/name): check the path")
    if not path.is_dir():
        raise UserError(f"{flag} {name}: is a file; give the folder that holds it")
