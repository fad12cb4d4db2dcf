"""Stacks are the one place for versions; the lock must agree with them."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from packaging.version import Version

from zerokit.stack import StackError, load_stack

REPO = Path(__file__).resolve().parents[2]


def locked_versions(lock: Path) -> dict[str, str]:
    return dict(re.findall(r"^([A-Za-z0-9_.-]+)==(\S+)", lock.read_text(), flags=re.M))


def test_cpu_stack_pins_the_field_tested_versions():
    stack = load_stack("cpu")
    assert stack.version("torch") == "2.13.0+cpu"
    assert stack.version("deepspeed") == "0.19.8"
    assert stack.version("transformers") == "5.23.0"
    assert stack.cpu_target == "x86-64-v3"


STACKS = sorted(p.stem for p in (REPO / "containers/stacks").glob("*.toml"))


@pytest.mark.parametrize("name", STACKS)
def test_lock_has_every_stack_pin_with_hashes(name: str):
    stack = load_stack(name)
    lock = stack.lock_file
    locked = locked_versions(lock)
    for requirement, version in stack.packages.items():
        package = requirement.split("[")[0]  # cuda-toolkit[nvcc,...] is locked as cuda-toolkit
        pinned = locked.get(package)
        assert pinned is not None and Version(pinned) == Version(version), f"{lock} pins {package}=={pinned}: make lock"
    entries = re.split(r"\n(?=[A-Za-z])", lock.read_text().strip())
    unhashed = [e.split()[0] for e in entries if "==" in e.split()[0] and "--hash=sha256:" not in e]
    assert unhashed == []


def test_ds_build_env_requests_exactly_the_stack_ops():
    env = load_stack("cpu").ds_build_env()
    assert env["DS_BUILD_OPS"] == "0"
    assert env["DS_ACCELERATOR"] == "cpu"
    assert env["ZEROKIT_CPU_TARGET"] == "x86-64-v3"
    built = sorted(k for k, v in env.items() if k.startswith("DS_BUILD_") and v == "1")
    assert built == [
        "DS_BUILD_AIO",
        "DS_BUILD_CPU_ADAGRAD",
        "DS_BUILD_CPU_ADAM",
        "DS_BUILD_CPU_LION",
        "DS_BUILD_FUSED_ADAM",
        "DS_BUILD_PIN_MEMORY",
        "DS_BUILD_SHM_COMM",
    ]


def write_stack(tmp_path: Path, **changes) -> Path:
    text = (REPO / "containers/stacks/cpu.toml").read_text()
    for key, value in changes.items():
        text = re.sub(rf"^{key} = .*$", f"{key} = {value}", text, flags=re.M)
    path = tmp_path / "custom.toml"
    path.write_text(text)
    return path


def test_unknown_op_is_refused(tmp_path: Path):
    path = write_stack(tmp_path, ds_ops='["cpu_adam", "warp_drive"]')
    with pytest.raises(StackError, match=r"unknown DeepSpeed op\(s\) \['warp_drive'\]"):
        load_stack(str(path))


def test_unknown_cpu_target_is_refused(tmp_path: Path):
    with pytest.raises(StackError, match="cpu_target 'native'"):
        load_stack(str(write_stack(tmp_path, cpu_target='"native"')))


def test_cuda_stack_needs_an_explicit_arch_list(tmp_path: Path):
    path = write_stack(tmp_path, accelerator='"cuda"', torch_cuda_arch_list='""')
    with pytest.raises(StackError, match="explicit torch_cuda_arch_list"):
        load_stack(str(path))


def test_missing_stack_names_the_known_ones():
    with pytest.raises(StackError, match="no stack 'rocm': pick one of cpu"):
        load_stack("rocm")
