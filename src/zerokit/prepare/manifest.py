"""The manifest of staged files: what `prepare` downloaded, at which revision, with each file's sha256.

One JSON file in the HF_HOME it staged into (`zerokit-manifest.json`), one entry per model or
dataset, merged with the entries already there. Tokens are never written.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

MANIFEST_NAME = "zerokit-manifest.json"


def sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for chunk in iter(lambda: handle.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def file_hashes(paths: list[Path], root: Path) -> dict[str, str]:
    """{path relative to root: sha256} for every file (links are followed: the HF cache links to blobs)."""
    return {str(p.relative_to(root)): sha256(p) for p in sorted(paths) if p.is_file()}


def entry(kind: str, name: str, revision: str, files: dict[str, str], **extra: str) -> dict:
    return {"kind": kind, "name": name, "revision": revision, "files": files, **extra}


def update_manifest(folder: Path, new: dict) -> Path:
    """Add (or replace) one entry, keyed by kind and name; written atomically."""
    path = folder / MANIFEST_NAME
    entries = json.loads(path.read_text())["entries"] if path.is_file() else []
    entries = [e for e in entries if (e["kind"], e["name"]) != (new["kind"], new["name"])] + [new]
    folder.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(f".{path.name}.{os.getpid()}")
    partial.write_text(json.dumps({"entries": entries}, indent=2, sort_keys=True) + "\n")
    os.replace(partial, path)
    return path
