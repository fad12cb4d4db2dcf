"""Files written whole or not at all, and files' hashes.

A reader (another rank, a requeued job, `doctor --against`) must never see half a file: each write goes to
a sibling named for this process, then is renamed over the target, which is atomic within one file system.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Any


def write_atomically(path: Path, text: str) -> None:
    """Write text to path: a crash leaves the old file or the new one, never half of one."""
    partial = path.with_name(f".{path.name}.{os.getpid()}")
    try:
        partial.write_text(text)
        os.replace(partial, path)
    except BaseException:
        partial.unlink(missing_ok=True)
        raise


def write_json(path: Path, data: Any, *, indent: int | None = 2, sort_keys: bool = True, **dumps: Any) -> None:
    """data as JSON (and a final newline), written atomically."""
    write_atomically(path, json.dumps(data, indent=indent, sort_keys=sort_keys, **dumps) + "\n")


def sha256_file(path: Path) -> str:
    """The file's sha256, read in 1 MiB blocks (checkpoints and SIFs are larger than memory should hold)."""
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()
