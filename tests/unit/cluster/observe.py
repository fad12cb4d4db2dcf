"""Shared by the cluster tests: what an environment says, as one tuple to compare with a table."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from zerokit.cluster import ClusterEnvironment

FIELDS = ("rank", "local_rank", "world_size", "local_world_size", "node_rank", "hosts", "main_address", "main_port")


def observed(env: ClusterEnvironment) -> tuple:
    """(rank, local_rank, world_size, local_world_size, node_rank, hosts, main_address, main_port)"""
    return tuple(getattr(env, field) for field in FIELDS)


def with_files(tmp_path: Path, environ: Mapping[str, str], files: Mapping[str, str]) -> dict[str, str]:
    """`environ` plus, for each variable of `files`, a file holding its text, named by that variable."""
    result = dict(environ)
    for variable, text in files.items():
        path = tmp_path / variable.lower()
        path.write_text(text)
        result[variable] = str(path)
    return result
