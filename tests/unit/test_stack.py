"""Stacks are the one place for versions; the lock must agree with them."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from packaging.version import Version

from zerokit.image.stack import SIMD_FOR_TARGET, StackError, load_stack

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
# The stacks that pin their own torch (the site stack's is the site's: tests/unit/test_site_torch.py).
PINNED_STACKS = [name for name in STACKS if name != "site"]


@pytest.mark.parametrize("name", PINNED_STACKS)
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


@pytest.mark.parametrize(
    ("change", "says"),
    [
        ({"ds_ops": None, "ds_opps": '["cpu_adam"]'}, "unknown key ds_opps: did you mean ds_ops?"),
        ({"python": "3.11"}, "python must be a string, got float 3.11"),
        ({"ds_ops": '"cpu_adam"'}, "ds_ops must be a list of strings, got str"),
        ({"accelerator": '"rocm"'}, "accelerator 'rocm' is not one of ['cpu', 'cuda', 'site']"),
        ({"base_image": None}, "missing key base_image"),
    ],
)
def test_a_malformed_stack_is_refused_in_one_line_naming_the_key(tmp_path: Path, change: dict, says: str):
    text = (REPO / "containers/stacks/cpu.toml").read_text()
    for key, value in change.items():
        if value is None:
            text = re.sub(rf"^{key} = .*\n", "", text, flags=re.M)
        elif re.search(rf"^{key} = ", text, flags=re.M):
            text = re.sub(rf"^{key} = .*$", f"{key} = {value}", text, flags=re.M)
        else:
            text = re.sub(r"^\[packages\]", f"{key} = {value}\n\n[packages]", text, count=1, flags=re.M)
    path = tmp_path / "bad.toml"
    path.write_text(text)
    with pytest.raises(StackError) as caught:
        load_stack(str(path))
    assert says in str(caught.value) and "\n" not in str(caught.value)


def test_every_cpu_target_has_its_simd_macro_in_the_build_env():
    env = load_stack("cpu").ds_build_env()
    assert env["ZEROKIT_CPU_SIMD"] == SIMD_FOR_TARGET[env["ZEROKIT_CPU_TARGET"]] == "-D__AVX256__"


def test_cuda_stack_needs_an_explicit_arch_list(tmp_path: Path):
    path = write_stack(tmp_path, accelerator='"cuda"', torch_cuda_arch_list='""')
    with pytest.raises(StackError, match="explicit torch_cuda_arch_list"):
        load_stack(str(path))


def test_missing_stack_names_the_known_ones():
    with pytest.raises(StackError, match="no stack 'rocm': pick one of cpu"):
        load_stack("rocm")


@pytest.mark.parametrize("name", STACKS)
def test_every_stack_file_loads_under_its_own_name(name: str):
    stack = load_stack(name)
    assert stack.name == name
    assert stack.lock_file == REPO / "containers/lock" / f"{name}.txt"
    if stack.accelerator == "cuda":
        assert stack.cuda.split(".")[0] in {"12", "13"}, stack.cuda
        assert all(re.fullmatch(r"\d+\.\d+", arch) for arch in stack.torch_cuda_arch_list.split(";"))


@pytest.mark.parametrize("name", PINNED_STACKS)
def test_lock_pins_exactly_the_stack_torch_and_deepspeed(name: str):
    stack = load_stack(name)
    lines = set(stack.lock_file.read_text().splitlines())
    for package in ("torch", "deepspeed"):
        pin = f"{package}=={stack.version(package)}"
        assert f"{pin} \\" in lines, f"{stack.lock_file} does not pin {pin}: make lock STACK={name}"


@pytest.mark.parametrize("name", PINNED_STACKS)
def test_lock_has_the_cuda_runtime_of_the_stack(name: str):
    """torch's CUDA runtime wheel in the lock is the stack's CUDA (major.minor), and a CPU stack has none."""
    stack = load_stack(name)
    runtimes = re.findall(r"^nvidia-cuda-runtime(?:-cu\d+)?==(\d+\.\d+)\.", stack.lock_file.read_text(), flags=re.M)
    if stack.accelerator == "cuda":
        assert runtimes == [".".join(stack.cuda.split(".")[:2])]
    else:
        assert runtimes == []


def test_cuda12_builds_for_volta_and_cuda13_cannot():
    cuda12, cuda13 = load_stack("cuda12"), load_stack("cuda13")
    assert "7.0" in cuda12.torch_cuda_arch_list.split(";")
    assert cuda12.version("torch") == "2.10.0"  # the newest torch whose PyPI build is CUDA 12
    assert cuda12.cuda.startswith("12.")
    assert "7.0" not in cuda13.torch_cuda_arch_list.split(";")  # CUDA 13's nvcc has no sm_70
    assert cuda13.cuda_home == "wheels"
    # PyPI's CUDA 12 nvcc wheels hold no nvcc: cuda12 compiles with the build machine's toolkit.
    assert cuda12.cuda_home == "system"
    assert not any(name.startswith("cuda-toolkit") for name in cuda12.packages)


def test_nvidia_base_uses_the_toolkit_of_its_base_image():
    stack = load_stack("nvidia-base")
    assert stack.cuda_home == "system"
    assert stack.base_image.startswith(f"nvidia/cuda:{stack.cuda}-cudnn-devel-ubuntu24.04@sha256:")
    assert stack.python == "3.12"  # Ubuntu 24.04's
    assert "libaio1t64" in stack.apt_runtime  # noble's name of libaio1
    assert {"7.0", "10.0", "12.0"} <= set(stack.torch_cuda_arch_list.split(";"))  # nvcc 12.8
    cuda12 = load_stack("cuda12")
    assert stack.packages == cuda12.packages and stack.cuda == cuda12.cuda
    assert stack.labels("abc", stack.base_image)["io.zerokit.cuda-home"] == "system"


def test_cuda_home_defaults_to_wheels_and_refuses_unknown_values(tmp_path: Path):
    cuda = write_stack(tmp_path, accelerator='"cuda"', torch_cuda_arch_list='"8.0"')
    assert load_stack(str(cuda)).cuda_home == "wheels"
    path = tmp_path / "conda.toml"
    path.write_text(cuda.read_text().replace("cpu_target =", 'cuda_home = "conda"\ncpu_target ='))
    with pytest.raises(StackError, match="cuda_home 'conda' is not one of"):
        load_stack(str(path))


def test_get_prints_the_cuda_home_for_the_build_scripts(capsys):
    from zerokit.image.stack import main

    assert main(["nvidia-base", "get", "cuda_home"]) == 0
    assert capsys.readouterr().out == "system\n"


def test_every_stack_pins_the_packages_hf_users_expect():
    for name in STACKS:
        packages = load_stack(name).packages
        assert {"tensorboard", "evaluate", "sentencepiece", "protobuf", "tiktoken"} <= packages.keys(), name


def test_a_stack_that_pins_a_shared_package_again_is_refused(tmp_path: Path):
    text = (REPO / "containers/stacks/cpu.toml").read_text()
    path = tmp_path / "twice.toml"
    path.write_text(text.replace("[packages]\n", '[packages]\ntransformers = "4.0.0"\n'))
    with pytest.raises(StackError, match=r"transformers pinned here and in .*common/packages\.toml: keep each version"):
        load_stack(str(path))


CUDA_STACKS = [name for name in PINNED_STACKS if load_stack(name).accelerator == "cuda"]


def test_the_cuda_stacks_pin_liger_kernel_in_one_place_and_the_cpu_stack_does_not():
    """--cross-entropy liger's kernels: one version, in common/cuda-packages.toml, for every CUDA stack's lock."""
    assert CUDA_STACKS == ["cuda12", "cuda13", "nvidia-base"]
    versions = {name: load_stack(name).packages.get("liger-kernel") for name in [*CUDA_STACKS, "cpu"]}
    assert len({versions[name] for name in CUDA_STACKS}) == 1 and None not in {versions[n] for n in CUDA_STACKS}
    assert versions["cpu"] is None and "liger-kernel" not in locked_versions(load_stack("cpu").lock_file)
    for name in CUDA_STACKS:  # pinned in each .in with its dependencies (torch, triton) locked beside it
        locked = locked_versions(load_stack(name).lock_file)
        assert {"liger-kernel", "torch", "triton"} <= locked.keys()
        assert f"liger-kernel=={versions[name]}" in (REPO / f"containers/lock/{name}.in").read_text()


def test_a_cuda_stack_that_pins_a_shared_cuda_package_again_is_refused(tmp_path: Path):
    stacks = tmp_path / "stacks"
    (stacks / "common").mkdir(parents=True)
    for shared in ("packages.toml", "cuda-packages.toml"):
        (stacks / "common" / shared).write_text((REPO / "containers/stacks/common" / shared).read_text())
    text = (REPO / "containers/stacks/cuda13.toml").read_text()
    (stacks / "twice.toml").write_text(text.replace("[packages]\n", '[packages]\nliger-kernel = "0.1.0"\n'))
    with pytest.raises(StackError, match=r"liger-kernel pinned here and in .*cuda-packages\.toml: keep each version"):
        load_stack(str(stacks / "twice.toml"))
