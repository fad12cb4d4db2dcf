"""The entrypoints on PATH: thin, and in an image they set a host's PYTHONHOME aside (said on stderr)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ENTRYPOINTS = Path(__file__).resolve().parents[2] / "entrypoints"
SRC = ENTRYPOINTS.parent / "src"


def run(name: str, *args: str, **env: str) -> subprocess.CompletedProcess:
    environ = {k: v for k, v in os.environ.items() if k not in ("PYTHONHOME", "ZEROKIT_PYTHON")}
    environ.update(PYTHONPATH=str(SRC), **env)
    return subprocess.run([str(ENTRYPOINTS / name), *args], env=environ, capture_output=True, text=True, timeout=60)


@pytest.mark.parametrize("name", ["train", "doctor", "launch", "prepare", "generate", "bench"])
def test_each_entrypoint_runs_its_command(name: str):
    result = run(name, "--help", ZEROKIT_PYTHON=sys.executable)
    assert result.returncode == 0, result.stderr
    assert f"usage: {name}" in result.stdout or "usage: prepare" in result.stdout


def test_in_an_image_a_host_pythonhome_is_set_aside():
    """Without the guard, this Python would look for its standard library under /opt/site and die."""
    result = run("train", "--help", ZEROKIT_PYTHON=sys.executable, PYTHONHOME="/opt/site/python-3.12")
    assert result.returncode == 0 and "usage: train" in result.stdout, result.stderr
    assert "zerokit: ignoring PYTHONHOME=/opt/site/python-3.12 from the host" in result.stderr
