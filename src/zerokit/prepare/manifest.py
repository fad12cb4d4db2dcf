"""The manifest of staged files: what `prepare` downloaded, at which revision, with each file's sha256.

One JSON file in the HF_HOME it staged into (`zerokit-manifest.json`), one entry per model or
dataset, merged with the entries already there. Tokens are never written.
"""

from __future__ import annotations

import json
from pathlib import Path

from zerokit.foundations.files import sha256_file, write_json

MANIFEST_NAME = "zerokit-manifest.json"


def file_hashes(paths: list[Path], root: Path) -> dict[str, str]:
    """{path relative to root: sha256} for every file (links are followed: the HF cache links to blobs)."""
    return {str(p.relative_to(root)): sha256_file(p) for p in sorted(paths) if p.is_file()}


def entry(kind: str, name: str, revision: str, files: dict[str, str], **extra: str) -> dict:
    return {"kind": kind, "name": name, "revision": revision, "files": files, **extra}


def update_manifest(folder: Path, new: dict) -> Path:
    """Add (or replace) one entry, keyed by kind and name; written atomically."""
    path = folder / MANIFEST_NAME
    entries = json.loads(path.read_text())["entries"] if path.is_file() else []
    entries = [e for e in entries if (e["kind"], e["name"]) != (new["kind"], new["name"])] + [new]
    folder.mkdir(parents=True, exist_ok=True)
    write_json(path, {"entries": entries})
    return path
