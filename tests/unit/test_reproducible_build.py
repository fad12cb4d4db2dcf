"""DeepSpeed's ops carry no build path: the compiler shim maps the folders containers/build-ds-wheel
names in ZEROKIT_PREFIX_MAP (the unpacked sdist, torch's site-packages) to fixed ones, in __FILE__
strings and in debug info alike, so two builds in two temporary folders give the same objects."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.skipif(shutil.which("g++") is None, reason="needs g++")


def compile_in(folder: Path, shims: Path) -> bytes:
    folder.mkdir(parents=True)
    source = folder / "op.cpp"
    source.write_text("#include <cstdio>\nconst char* where() { return __FILE__; }\n")
    env = {
        **os.environ,
        "PATH": f"{shims}:{os.environ['PATH']}",
        "ZEROKIT_CPU_TARGET": "x86-64-v3",
        "ZEROKIT_CPU_SIMD": "-D__AVX256__",
        "ZEROKIT_PREFIX_MAP": f"{folder}=/usr/src/deepspeed /nowhere=/usr/lib/python3/site-packages",
    }
    out = folder / "op.o"
    subprocess.run(["g++", "-g", "-O2", "-c", str(source), "-o", str(out)], env=env, check=True, cwd=folder)
    return out.read_bytes()


def test_two_build_folders_give_the_same_object_with_no_build_path(tmp_path: Path):
    shims = tmp_path / "shims"
    shims.mkdir()
    (shims / "g++").symlink_to(REPO / "containers" / "portable-cc")
    first = compile_in(tmp_path / "tmp.AAAA" / "deepspeed-0.19.8", shims)
    second = compile_in(tmp_path / "tmp.BBBB" / "deepspeed-0.19.8", shims)
    assert b"tmp.AAAA" not in first and str(tmp_path).encode() not in first
    assert b"/usr/src/deepspeed/op.cpp" in first
    assert first == second
