"""Helpers for the doctor's tests: stacks written to tmp_path, a healthy environment, the CLI in and out of process."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path

import pytest

from zerokit.doctor import Context
from zerokit.doctor.cli import main
from zerokit.image.stack import load_stack

REPO = Path(__file__).resolve().parents[3]
CPU_STACK = REPO / "containers" / "stacks" / "cpu.toml"


def write_stack(tmp_path: Path, text_changes: Mapping[str, str] | None = None, **keys: str) -> Path:
    """The cpu stack (and the shared packages beside it) with top-level `key = value` lines replaced
    (values as TOML) and other text swapped."""
    text = CPU_STACK.read_text()
    common = (CPU_STACK.parent / "common" / "packages.toml").read_text()
    for key, value in keys.items():
        text, count = re.subn(rf"^{key} = .*$", f"{key} = {value}", text, flags=re.M)
        assert count == 1, f"no top-level {key} in {CPU_STACK}"
    for old, new in (text_changes or {}).items():
        assert old in text + common, f"{old!r} not in {CPU_STACK} or its common/packages.toml"
        text, common = text.replace(old, new), common.replace(old, new)
    path = tmp_path / "custom.toml"
    path.write_text(text)
    (tmp_path / "common").mkdir(exist_ok=True)
    (tmp_path / "common" / "packages.toml").write_text(common)
    return path


def healthy_environ(tmp_path: Path) -> dict[str, str]:
    """A clean environment: PATH, a private HOME and caches, nothing inherited that could change a verdict."""
    caches = tmp_path / "caches"
    env = {
        "PATH": os.environ.get("PATH", os.defpath),
        "HOME": str(tmp_path / "home"),
        "LANG": "C.UTF-8",
        "TORCH_EXTENSIONS_DIR": str(caches / "torch_extensions"),
        "TRITON_CACHE_DIR": str(caches / "triton"),
        "HF_HOME": str(caches / "huggingface"),
    }
    for name in ("TORCH_EXTENSIONS_DIR", "TRITON_CACHE_DIR", "HF_HOME", "HOME"):
        Path(env[name]).mkdir(parents=True, exist_ok=True)
    return env


@pytest.fixture
def environ(tmp_path: Path) -> dict[str, str]:
    return healthy_environ(tmp_path)


def context(environ: Mapping[str, str] | None = None, stack: str | Path = "cpu", **options) -> Context:
    return Context(stack=load_stack(str(stack)), environ=environ or {}, **options)


def statuses(results) -> dict[str, str]:
    return {r.name: r.status for r in results}


def only(results, name: str):
    matching = [r for r in results if r.name == name]
    assert len(matching) == 1, f"expected one {name!r} in {[r.name for r in results]}"
    return matching[0]


def run_main(argv: list[str], environ: Mapping[str, str], capsys) -> tuple[int, list[dict[str, str]]]:
    """The CLI in this process, with --json: (exit code, rows)."""
    code = main([*argv, "--json"], environ)
    return code, json.loads(capsys.readouterr().out)


def failures(rows: list[dict[str, str]]) -> list[str]:
    return [row["name"] for row in rows if row["status"] == "fail"]


def run_doctor(
    args: list[str], environ: Mapping[str, str], prefix: list[str] | None = None, first_on_path: Path | None = None
):
    """`python -m zerokit doctor ARGS` as a user runs it, optionally under a wrapper (unshare) or with a
    folder of modules ahead of everything else on sys.path."""
    paths = [str(first_on_path)] if first_on_path else []
    env = {**environ, "PYTHONPATH": os.pathsep.join([*paths, str(REPO / "src")])}
    argv = [*(prefix or []), sys.executable, "-m", "zerokit", "doctor", *args]
    return subprocess.run(argv, env=env, cwd=REPO, capture_output=True, text=True, timeout=120)
