"""The compiler shim builds DeepSpeed's host ops for the stack's CPU target, not the build machine's."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from zerokit.image.stack import SIMD_FOR_TARGET

REPO = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.skipif(shutil.which("g++") is None, reason="needs g++")


def predefined_macros(tmp_path: Path, target: str, *flags: str) -> set[str]:
    shims = tmp_path / "shims"
    shims.mkdir(exist_ok=True)
    if not (shims / "g++").exists():
        (shims / "g++").symlink_to(REPO / "containers/portable-cc")
    env = {**os.environ, "PATH": f"{shims}:{os.environ['PATH']}", "ZEROKIT_CPU_TARGET": target}
    env["ZEROKIT_CPU_SIMD"] = SIMD_FOR_TARGET[target]  # as the stack's ds_build_env pairs them
    out = subprocess.run(
        ["g++", "-march=native", *flags, "-dM", "-E", "-x", "c++", "/dev/null"],
        env=env,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    return {line.split()[1] for line in out.splitlines() if line.startswith("#define")}


def test_v3_target_gives_avx2_and_no_avx512_whatever_the_build_machine(tmp_path: Path):
    macros = predefined_macros(tmp_path, "x86-64-v3", "-D__AVX512__")
    assert "__AVX2__" in macros and "__FMA__" in macros
    assert not any(m.startswith("__AVX512") for m in macros)
    assert "__AVX256__" in macros  # DeepSpeed's SIMD switch follows the target


def test_baseline_target_has_no_avx_and_scalar_kernels(tmp_path: Path):
    macros = predefined_macros(tmp_path, "x86-64", "-D__AVX256__")
    assert "__AVX__" not in macros
    assert "__SCALAR__" in macros and "__AVX256__" not in macros


def test_without_the_stacks_environment_it_says_where_it_comes_from(tmp_path: Path):
    shims = tmp_path / "shims"
    shims.mkdir()
    (shims / "gcc").symlink_to(REPO / "containers/portable-cc")
    env = {**os.environ, "PATH": f"{shims}:{os.environ['PATH']}", "ZEROKIT_CPU_TARGET": "x86-64-v3"}
    env.pop("ZEROKIT_CPU_SIMD", None)
    result = subprocess.run(["gcc", "--version"], env=env, capture_output=True, text=True)
    assert result.returncode != 0
    assert "ZEROKIT_CPU_SIMD" in result.stderr and "ds-build-env" in result.stderr
