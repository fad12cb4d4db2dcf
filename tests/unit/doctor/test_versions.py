"""Versions against the stack: drift fails with the rebuild fix; PEP 440 matching as pip does it."""

from __future__ import annotations

import shutil
import sys
from importlib import metadata
from pathlib import Path

import pytest

from tests.unit.doctor.conftest import CPU_STACK, context, failures, only, run_main, write_stack
from zerokit.doctor.versions import check_cuda_libraries, check_lock, check_packages, check_python, matches


def test_this_environment_matches_the_cpu_stack():
    results = check_packages(context())
    assert [r.name for r in results] == [
        f"version: {p}" for p in ("torch", "deepspeed", "transformers", "datasets", "accelerate", "peft")
    ]
    assert {r.status for r in results} == {"ok"}, results
    assert only(results, "version: torch").detail == "2.13.0+cpu"


def test_torch_is_judged_by_its_own_version_not_its_metadatas(tmp_path: Path, monkeypatch):
    """PyPI's CUDA torch wheels (the GPU machine's site torch: metadata 2.11.0, torch.__version__ 2.11.0+cu130):
    the first GPU proof's doctor failed its own site stack on this; metadata without the local label here."""
    torch_version = metadata.version("torch")
    fake = tmp_path / f"torch-{torch_version.split('+')[0]}.dist-info"
    fake.mkdir()
    (fake / "METADATA").write_text(f"Metadata-Version: 2.1\nName: torch\nVersion: {torch_version.split('+')[0]}\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    assert metadata.version("torch") != torch_version  # as PyPI's CUDA wheels say it
    assert only(check_packages(context()), "version: torch").status == "ok"


def test_transformers_drift_fails_naming_the_rebuild(tmp_path: Path, environ, capsys):
    installed = metadata.version("transformers")
    stack = write_stack(tmp_path, text_changes={f'transformers = "{installed}"': 'transformers = "4.57.1"'})
    drift = only(check_packages(context(stack=stack)), "version: transformers")
    assert drift.status == "fail"
    assert drift.detail == f"{installed} installed; the stack pins 4.57.1"
    assert "`make venv STACK=cpu`" in drift.fix and "rebuild the image" in drift.fix

    code, rows = run_main(["--stack", str(stack), "--strict"], environ, capsys)
    assert code == 1
    assert failures(rows) == ["version: transformers"]


def test_a_tracked_package_the_stack_does_not_pin_is_skipped(tmp_path: Path):
    stack = write_stack(tmp_path, text_changes={'peft = "0.21.2"\n': ""})
    peft = only(check_packages(context(stack=stack)), "version: peft")
    assert peft.status == "skip" and "not pinned by stack 'cpu'" in peft.detail


def test_python_drift_fails(tmp_path: Path):
    other = "3.10" if sys.version_info[:2] != (3, 10) else "3.12"
    (result,) = check_python(context(stack=write_stack(tmp_path, python=f'"{other}"')))
    assert result.status == "fail" and f"the stack wants {other}" in result.detail
    assert check_python(context())[0].status == "ok"


def test_lock_drift_fails_naming_the_package(tmp_path: Path, monkeypatch):
    """A lock beside a copied stacks folder (Stack.lock_file is derived from zerokit.image.stack.STACKS_DIR)."""
    stacks, lock = tmp_path / "stacks", tmp_path / "lock"
    shutil.copytree(CPU_STACK.parent, stacks)
    lock.mkdir()
    real_lock = (CPU_STACK.parents[1] / "lock" / "cpu.txt").read_text()
    rich = metadata.version("rich")
    assert f"rich=={rich} \\" in real_lock
    (lock / "cpu.txt").write_text(real_lock.replace(f"rich=={rich} \\", "rich==13.0.0 \\"))
    monkeypatch.setattr("zerokit.image.stack.STACKS_DIR", stacks)
    (result,) = check_lock(context())
    assert result.status == "fail"
    assert f"rich {rich} (lock: 13.0.0)" in result.detail and result.detail.startswith("1 of ")
    assert "make venv STACK=cpu" in result.fix


def test_lock_matches_here():
    (result,) = check_lock(context())
    assert result.status == "ok", result.detail


@pytest.mark.parametrize(
    ("installed", "pinned", "expected"),
    [
        ("0.19.8", "0.19.8", True),
        ("0.19.8+8f3a2c1", "0.19.8", True),  # a local label is accepted by a pin without one, as pip does
        ("2.13.0", "2.13.0+cpu", False),  # the CUDA build of torch is not the CPU one
        ("2.13.0+cu130", "2.13.0+cpu", False),
        ("5.23.0", "5.23.1", False),
        ("5.23", "5.23.0", True),
    ],
)
def test_matches_is_pep440_equality(installed: str, pinned: str, expected: bool):
    assert matches(installed, pinned) is expected


def test_cuda_libraries_on_the_cpu_stack():
    cuda, nccl, cudnn = check_cuda_libraries(context())
    assert (cuda.status, cuda.detail) == ("ok", "none (CPU build of torch, as the stack wants)")
    assert nccl.status == cudnn.status == "skip"


def test_cpu_torch_on_a_cuda_stack_fails(tmp_path: Path):
    stack = write_stack(tmp_path, accelerator='"cuda"', cuda='"13.0"', torch_cuda_arch_list='"8.0;9.0"')
    cuda, _, _ = check_cuda_libraries(context(stack=stack))
    assert cuda.status == "fail" and cuda.detail == "torch is a CPU build; the stack wants CUDA 13.0"


@pytest.mark.parametrize(
    ("built_with", "status"),
    [("13.0", "ok"), ("13.0.3", "ok"), ("12.8", "fail"), ("13.1", "fail")],
)
def test_cuda_build_of_torch_is_compared_by_major_minor(built_with: str, status: str):
    """torch says 13.0 where the stack pins the 13.0.3 toolkit (seen building the cuda13 image)."""
    from zerokit.doctor.versions import _cuda_runtime
    from zerokit.image.stack import load_stack

    assert _cuda_runtime(load_stack("cuda13"), built_with).status == status
