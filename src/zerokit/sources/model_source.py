"""`--model`/`--tokenizer` values: a local folder or a Hub id, told apart before anything loads.

Hugging Face takes an existing folder first and anything else as a Hub id, so a mistyped path
becomes a Hub lookup, and offline the user is told to stage a "model" that is only a typo. Here a
value that can only be a path (absolute, `./`, `../`, `~`, or more than one `/`) must be a folder
holding what the loader needs; one line otherwise.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

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


def from_pretrained_checked(label: str, load: Callable[[], tuple[Any, dict]]) -> Any:
    """The model `load()` returns, from_pretrained(..., output_loading_info=True), checked against the weights it
    read (`label` names the folder, as "--model DIR"); transformers' own load report is left out, as this says it.

    transformers fills in every tensor missing from the weights with fresh values and goes on (a table among its
    warnings), and fails with a traceback on a tensor of another shape: weights of another architecture or size
    than the config's. Most of the tensors missing, or one of another shape, is refused in one line; some (a new
    head) are named in one line on rank 0's stderr.
    """
    from transformers.utils import logging as hf_logging

    verbosity = hf_logging.get_verbosity()
    hf_logging.set_verbosity_error()
    try:
        model, info = load()
    except RuntimeError as error:
        if "ignore_mismatched_sizes" not in str(error):
            raise
        raise UserError(
            f"{label}: its weights have other shapes than its config.json gives (a hidden size, a vocabulary, a "
            "number of heads): give the config.json the weights were saved with"
        ) from None
    finally:
        hf_logging.set_verbosity(verbosity)
    said = check_loaded_weights(label, info, model)
    if said and os.environ.get("RANK", "0") == "0":
        print(said, file=sys.stderr, flush=True)
    return model


def check_loaded_weights(label: str, info: dict, model: Any) -> str | None:
    """The line to say of what from_pretrained found missing (None: nothing); most of a model missing is refused."""
    missing = sorted(info.get("missing_keys") or ())
    if not missing:
        return None
    architecture, tensors = type(model).__name__, len(model.state_dict())
    if 2 * len(missing) > tensors:
        unexpected = sorted(info.get("unexpected_keys") or ())
        other = f", which hold other names ({unexpected[0]}, ...)" if unexpected else ""
        raise UserError(
            f"{label}: its weights are not those of a {architecture}, which its config.json names: {len(missing)} of "
            f"its {tensors} tensors are missing from them{other}: give the config.json the weights were saved with"
        )
    more = ", ..." if len(missing) > 3 else ""
    return (
        f"zerokit: {label}: {len(missing)} of the {tensors} tensors of its {architecture} are not in its weights and "
        f"start from fresh values ({', '.join(missing[:3])}{more})"
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
