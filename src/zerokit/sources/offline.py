"""Offline by default: `train` reads only the HF cache, and what is missing fails in one line naming `prepare`.

Compute nodes usually have no network; a download attempt there hangs or fails deep in a rank.
`train` sets HF_HUB_OFFLINE=1 and HF_DATASETS_OFFLINE=1 unless they are set already (or
`--online` is given), and checks the Hub names it was given before any rank starts.
"""

from __future__ import annotations

import os
from collections.abc import MutableMapping
from pathlib import Path

from zerokit.foundations.errors import UserError

OFFLINE_DEFAULTS = {"HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1"}


def go_offline(environ: MutableMapping[str, str]) -> None:
    """Offline unless the user chose otherwise; called before huggingface_hub is imported (it reads them once)."""
    for name, value in OFFLINE_DEFAULTS.items():
        environ.setdefault(name, value)


def is_offline(environ) -> bool:
    return environ.get("HF_HUB_OFFLINE", "").strip().lower() in ("1", "true", "yes", "on")


def not_cached(what: str, flag: str, name: str, why: str) -> UserError:
    from huggingface_hub.constants import HF_HOME

    if "/" in name:
        why += f" (nor is there a local folder {name})"
    return UserError(
        f"{what} {name}: {why}, and this node is offline (HF_HUB_OFFLINE=1): stage it where there is network, "
        f"into the HF_HOME this node uses ({HF_HOME}): `zerokit prepare {flag} {name}`; or pass --online"
    )


def require_cached_model(name: str) -> None:
    """A Hub model id (not a local folder) must be complete in the cache."""
    if Path(name).expanduser().is_dir():
        return
    from huggingface_hub.constants import HF_HUB_CACHE

    from zerokit.sources.hub_cache import cached_snapshot, missing_model_files

    folder, why = cached_snapshot(name, "model", Path(HF_HUB_CACHE))
    if folder is not None and (missing := missing_model_files(folder)):
        why = f"cached without {', '.join(missing)}"
    if folder is None or why:
        raise not_cached("model", "--model", name, why)


def require_cached_tokenizer(name: str) -> None:
    if Path(name).expanduser().is_dir():
        return
    from huggingface_hub.constants import HF_HUB_CACHE

    from zerokit.sources.hub_cache import cached_snapshot

    folder, why = cached_snapshot(name, "model", Path(HF_HUB_CACHE))
    if folder is None:
        raise not_cached("tokenizer", "--model", name, why)


def require_cached_dataset(name: str) -> None:
    """A Hub dataset: its files in the hub cache, or the Arrow files load_dataset prepared."""
    from huggingface_hub.constants import HF_HOME, HF_HUB_CACHE

    from zerokit.sources.hub_cache import NOT_DATA, cached_snapshot

    folder, why = cached_snapshot(name, "dataset", Path(HF_HUB_CACHE))
    if folder is not None and any(p.is_file() and p.name not in NOT_DATA for p in folder.rglob("*")):
        return
    arrow = Path(os.environ.get("HF_DATASETS_CACHE") or Path(HF_HOME) / "datasets") / name.replace("/", "___")
    if arrow.is_dir() and any(arrow.rglob("*.arrow")):
        return
    raise not_cached("dataset", "--dataset", name, why or "no data files cached")
