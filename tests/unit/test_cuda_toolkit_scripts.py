"""Where nvcc comes from when DeepSpeed's GPU ops are built, and what `make image` hands docker.

containers/cuda-home (a CUDA_HOME of the CUDA 13 wheels), containers/system-cuda-home (a toolkit
outside the lock, for cuda12 and nvidia-base) and containers/build-image, run on fake toolkits and a
fake docker: no GPU, no CUDA and no docker needed.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from zerokit.image.stack import load_stack

REPO = Path(__file__).resolve().parents[2]


def fake_nvcc(bin_dir: Path, release: str) -> None:
    bin_dir.mkdir(parents=True, exist_ok=True)
    nvcc = bin_dir / "nvcc"
    lines = ["#!/bin/sh", 'echo "nvcc: NVIDIA (R) Cuda compiler driver"']
    lines.append(f'echo "Cuda compilation tools, release {release}, V{release}.93"')
    nvcc.write_text("\n".join(lines) + "\n")
    nvcc.chmod(0o755)


def system_cuda_home(major: str, cuda_home: Path | None) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != "CUDA_HOME"}
    if cuda_home is not None:
        env["CUDA_HOME"] = str(cuda_home)
    return subprocess.run(
        [REPO / "containers/system-cuda-home", major], env=env, capture_output=True, text=True, timeout=30
    )


def test_system_toolkit_of_the_stack_major_is_used(tmp_path: Path):
    fake_nvcc(tmp_path / "cuda-12.4/bin", "12.4")
    result = system_cuda_home("12", tmp_path / "cuda-12.4")
    assert result.returncode == 0, result.stderr
    assert result.stdout == f"{tmp_path / 'cuda-12.4'}\n"
    assert "CUDA 12.4" in result.stderr


def test_system_toolkit_of_another_major_is_refused(tmp_path: Path):
    fake_nvcc(tmp_path / "cuda-13.0/bin", "13.0")
    result = system_cuda_home("12", tmp_path / "cuda-13.0")
    assert result.returncode == 2
    assert "is CUDA 13.0; this stack needs CUDA 12.x" in result.stderr
    assert result.stdout == ""


def test_no_system_toolkit_says_where_it_looked_and_what_to_do(tmp_path: Path):
    result = system_cuda_home("12", tmp_path / "nothing")
    assert result.returncode == 2
    assert f"no nvcc in {tmp_path / 'nothing'}/bin" in result.stderr
    assert "module load cuda/12.x" in result.stderr
    # Without CUDA_HOME it is /usr/local/cuda (nvidia/cuda images), found or not.
    default = system_cuda_home("12", None)
    assert "/usr/local/cuda" in default.stdout + default.stderr


def fake_wheels(site: Path, layout: dict[str, str]) -> None:
    """An environment's site-packages with the given files (relative path -> text) under nvidia/."""
    for relative, text in layout.items():
        path = site / "nvidia" / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)


def cuda_home(site: Path, major: str, out: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(site)}
    return subprocess.run(
        [REPO / "containers/cuda-home", sys.executable, major, out], env=env, capture_output=True, text=True, timeout=60
    )


@pytest.mark.skipif(shutil.which("gcc") is None, reason="needs gcc (the libcuda stub)")
def test_cuda13_wheels_make_a_cuda_home(tmp_path: Path):
    site = tmp_path / "site"
    fake_wheels(site, {"cu13/include/cuda_runtime.h": "", "cu13/lib/libcudart.so.13": "", "cu13/nvvm/bin/cicc": ""})
    fake_nvcc(site / "nvidia/cu13/bin", "13.0")
    out = tmp_path / "cuda"
    result = cuda_home(site, "13", out)
    assert result.returncode == 0, result.stderr
    assert "release 13.0" in result.stdout
    assert (out / "bin/nvcc").resolve() == (site / "nvidia/cu13/bin/nvcc").resolve()
    assert (out / "lib64/libcudart.so").resolve() == (site / "nvidia/cu13/lib/libcudart.so.13").resolve()
    assert (out / "targets/x86_64-linux/include/cuda_runtime.h").exists()
    assert (out / "nvvm/bin/cicc").exists()
    stub = (out / "lib/libcuda.so").resolve()
    assert stub == (out / "lib/stubs/libcuda.so").resolve()
    if shutil.which("readelf"):
        dynamic = subprocess.run(["readelf", "-d", stub], capture_output=True, text=True, check=True).stdout
        assert "[libcuda.so.1]" in dynamic


def test_cuda12_wheels_have_no_nvcc_and_say_so(tmp_path: Path):
    """PyPI's nvidia-cuda-nvcc-cu12 (12.8.93 included) holds ptxas and libnvvm, not nvcc."""
    site = tmp_path / "site"
    fake_wheels(
        site,
        {
            "cuda_nvcc/bin/ptxas": "",
            "cuda_nvcc/nvvm/lib64/libnvvm.so": "",
            "cuda_runtime/lib/libcudart.so.12": "",
            "cuda_cccl/include/cuda/std/version": "",
        },
    )
    result = cuda_home(site, "12", tmp_path / "cuda")
    assert result.returncode == 2
    assert "PyPI's CUDA 12 wheels have no nvcc" in result.stderr
    assert 'cuda_home = "system"' in result.stderr
    assert not (tmp_path / "cuda").exists()


def build_image_args(tmp_path: Path, stack: str, base_image: str) -> list[str]:
    """The arguments containers/build-image gives `docker`, run in a copy of what it reads."""
    tree = tmp_path / "tree"
    shutil.copytree(REPO / "containers/stacks", tree / "containers/stacks")
    shutil.copy2(REPO / "containers/build-image", tree / "containers/build-image")
    for name in (  # what the Dockerfile copies too
        "__init__.py", "foundations/__init__.py", "foundations/errors.py", "foundations/paths.py",
        "image/__init__.py", "image/stack.py",
    ):  # fmt: skip
        (tree / "src/zerokit" / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(REPO / "src/zerokit" / name, tree / "src/zerokit" / name)
    docker = tmp_path / "docker"
    docker.write_text(f'#!/bin/sh\nprintf "%s\\0" "$@" > {tmp_path / "args"}\n')
    docker.chmod(0o755)
    env = {k: v for k, v in os.environ.items() if k not in {"ZEROKIT_HOME", "GIT_DIR"}}
    env.update(DOCKER=str(docker), PATH=f"{Path(sys.executable).parent}:{env['PATH']}")
    subprocess.run(
        [tree / "containers/build-image", stack, f"zerokit:{stack}", base_image],
        env=env,
        cwd=tmp_path,
        check=True,
        timeout=60,
    )
    return (tmp_path / "args").read_text().split("\0")[:-1]


def build_args(args: list[str], flag: str) -> dict[str, str]:
    values = [args[i + 1] for i, arg in enumerate(args) if arg == flag]
    return dict(value.split("=", 1) for value in values)


def test_build_image_hands_docker_the_nvidia_base_stack(tmp_path: Path):
    stack = load_stack("nvidia-base")
    args = build_image_args(tmp_path, "nvidia-base", stack.base_image)
    assert args[:2] == ["build", "--network"]
    assert args[-1] == "."
    arguments = build_args(args, "--build-arg")
    assert arguments["BASE_IMAGE"] == stack.base_image
    assert arguments["BASE_IMAGE"].startswith("nvidia/cuda:12.8.1-cudnn-devel-ubuntu24.04@sha256:")
    assert arguments["STACK"] == "nvidia-base"
    assert arguments["DS_ACCELERATOR"] == "cuda"
    assert arguments["APT_RUNTIME"].split() == list(stack.apt_runtime)
    assert "libaio1t64" in arguments["APT_RUNTIME"].split()
    assert arguments["APT_BUILD"].split() == ["build-essential", "python3-dev", "libaio-dev", "binutils"]
    labels = build_args(args, "--label")
    assert labels["io.zerokit.stack"] == "nvidia-base"
    assert labels["io.zerokit.cuda"] == "12.8.1"
    assert labels["io.zerokit.cuda-home"] == "system"
    assert labels["io.zerokit.torch"] == "2.10.0"
    assert labels["io.zerokit.torch-cuda-arch-list"] == "7.0;8.0;9.0;10.0;12.0"
    assert labels["org.opencontainers.image.base.name"] == stack.base_image
    assert "--secret" not in args  # no CA file given


def test_build_image_of_cuda12_is_debian_with_the_volta_arch_list(tmp_path: Path):
    args = build_image_args(tmp_path, "cuda12", "zerokit/debian:bookworm")
    arguments, labels = build_args(args, "--build-arg"), build_args(args, "--label")
    assert arguments["BASE_IMAGE"] == "zerokit/debian:bookworm"
    assert "libaio1=0.3.113-4" in arguments["APT_RUNTIME"].split()
    assert labels["io.zerokit.torch-cuda-arch-list"] == "7.0;8.0;9.0"
    assert labels["io.zerokit.cuda-home"] == "system"


def build_ds_wheel(tmp_path: Path, stack: str, cuda_home: Path, **extra_env: str) -> subprocess.CompletedProcess:
    """containers/build-ds-wheel with a python whose `-m pip download` leaves an empty sdist and whose
    `-m pip wheel` records its environment instead."""
    python = tmp_path / "python"
    python.write_text(
        "#!/bin/sh\n"
        'if [ "$1 $2 $3" = "-m pip download" ]; then\n'
        '  while [ "$1" != -d ]; do shift; done\n'
        '  sdist=$(mktemp -d) && mkdir "$sdist/deepspeed-0.19.8" && touch "$sdist/deepspeed-0.19.8/PKG-INFO"\n'
        '  mkdir -p "$2" && tar -czf "$2/deepspeed-0.19.8.tar.gz" -C "$sdist" deepspeed-0.19.8; exit 0\n'
        "fi\n"
        'if [ "$1 $2" = "-m pip" ]; then\n'
        f"  env > {tmp_path / 'pip-env'}\n"
        '  while [ "$1" != -w ]; do shift; done\n'
        '  touch "$2/deepspeed-0.19.8-cp311-cp311-linux_x86_64.whl"; exit 0\n'
        "fi\n"
        f'exec {sys.executable} "$@"\n'
    )
    python.chmod(0o755)
    env = {k: v for k, v in os.environ.items() if k not in {"LIBRARY_PATH", "ZEROKIT_HOME"}}
    env.update(CUDA_HOME=str(cuda_home), **extra_env)
    return subprocess.run(
        [REPO / "containers/build-ds-wheel", python, stack, tmp_path / "wheels"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )


@pytest.mark.parametrize("stack", ["cuda12", "nvidia-base"])
def test_system_stacks_build_with_the_system_toolkit_and_its_libcuda_stub(tmp_path: Path, stack: str):
    fake_nvcc(tmp_path / "cuda/bin", "12.8")
    result = build_ds_wheel(tmp_path, stack, tmp_path / "cuda")
    assert result.returncode == 0, result.stderr
    pip_env = dict(line.split("=", 1) for line in (tmp_path / "pip-env").read_text().splitlines() if "=" in line)
    assert pip_env["CUDA_HOME"] == str(tmp_path / "cuda")
    assert pip_env["LIBRARY_PATH"].split(":")[-1] == str(tmp_path / "cuda/lib64/stubs")  # -lcuda with no driver
    assert pip_env["TORCH_CUDA_ARCH_LIST"] == load_stack(stack).torch_cuda_arch_list
    assert pip_env["DS_BUILD_FUSED_ADAM"] == "1"


def test_system_stack_refuses_a_toolkit_of_another_major_before_compiling(tmp_path: Path):
    fake_nvcc(tmp_path / "cuda/bin", "13.0")
    result = build_ds_wheel(tmp_path, "cuda12", tmp_path / "cuda")
    assert result.returncode == 2
    assert "this stack needs CUDA 12.x" in result.stderr
    assert not (tmp_path / "pip-env").exists()


@pytest.mark.skipif(shutil.which("gcc") is None, reason="needs gcc (the libcuda stub)")
def test_wheels_stack_builds_with_the_cuda_home_of_its_wheels_whatever_cuda_home_says(tmp_path: Path):
    site = tmp_path / "site"
    fake_wheels(site, {"cu13/include/cuda_runtime.h": "", "cu13/lib/libcudart.so.13": "", "cu13/nvvm/bin/cicc": ""})
    fake_nvcc(site / "nvidia/cu13/bin", "13.0")
    result = build_ds_wheel(tmp_path, "cuda13", tmp_path / "elsewhere", PYTHONPATH=str(site))
    assert result.returncode == 0, result.stderr
    assert "release 13.0" in result.stdout
    pip_env = dict(line.split("=", 1) for line in (tmp_path / "pip-env").read_text().splitlines() if "=" in line)
    assert pip_env["CUDA_HOME"] != str(tmp_path / "elsewhere")
    assert pip_env["CUDA_HOME"].endswith("/cuda")  # made by containers/cuda-home in the build's scratch folder
    assert "stubs" not in pip_env.get("LIBRARY_PATH", "")
