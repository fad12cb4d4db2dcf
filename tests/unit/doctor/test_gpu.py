"""GPU verdicts. There is no GPU here: GpuInfo values stand in for what torch would report on one; the
`--require-gpu` fail and the probe itself run for real on this CPU-only torch."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.unit.doctor.conftest import context, failures, only, run_main, write_stack
from zerokit.doctor.gpu import GpuInfo, check_gpu, driver_cuda_version, parse_arch_list, probe_gpu
from zerokit.image import built_ops
from zerokit.image.built_ops import BuiltOps

TORCH_ARCHS = ("sm_80", "sm_90", "sm_100", "sm_120", "compute_120")


def cuda_stack(tmp_path: Path, arch_list: str = "8.0;9.0"):
    return write_stack(tmp_path, accelerator='"cuda"', cuda='"13.0"', torch_cuda_arch_list=f'"{arch_list}"')


def fake(*capabilities: tuple[int, int], driver=(13, 0), arch_list=TORCH_ARCHS, built: BuiltOps | None = None):
    devices = tuple((f"GPU sm_{a}{b}", (a, b)) for a, b in capabilities)
    return lambda: GpuInfo("13.0", devices, arch_list, driver, built)


def venv_built_for(prefix: Path, arch_list: str, stack: str = "site") -> BuiltOps:
    """An environment whose ops gate recorded ops built for arch_list (zerokit-ops.json in prefix), read back."""
    prefix.mkdir(exist_ok=True)
    built = BuiltOps(stack, "cuda", arch_list, ("cpu_adam", "fused_adam"), "0.19.8", "0123456789abcdef")
    built_ops.record(built, prefix)
    return built_ops.recorded(prefix)


def test_probe_on_this_cpu_only_torch():
    info = probe_gpu()
    assert info == GpuInfo(None, (), (), None)
    assert driver_cuda_version() is None  # no libcuda.so.1 here


@pytest.mark.skipif(probe_gpu().devices != (), reason="a GPU is visible")
def test_require_gpu_without_one_fails(environ, capsys):
    code, rows = run_main(["--require-gpu", "--strict"], environ, capsys)
    assert code == 1
    assert failures(rows) == ["gpu"]
    (row,) = [r for r in rows if r["name"] == "gpu"]
    assert row["detail"] == "torch is a CPU build, and --require-gpu was given"
    assert "use a CUDA stack and image" in row["fix"]
    assert run_main(["--strict"], environ, capsys)[0] == 0  # without it, no GPU is fine on the cpu stack


def test_a_supported_gpu_passes(tmp_path: Path):
    results = check_gpu(context(stack=cuda_stack(tmp_path)), probe=fake((8, 0), (9, 0)))
    assert [(r.name, r.status) for r in results] == [
        ("gpu", "ok"),
        ("gpu: torch arch", "ok"),
        ("gpu: ops arch", "ok"),
        ("gpu: driver", "ok"),
    ]
    assert results[0].detail == "2 visible: GPU sm_80 (8.0), GPU sm_90 (9.0)"


def test_a_gpu_the_ops_were_not_built_for_fails(tmp_path: Path):
    results = check_gpu(context(stack=cuda_stack(tmp_path)), probe=fake((12, 0)))
    ops = only(results, "gpu: ops arch")
    assert ops.status == "fail" and ops.detail == "DeepSpeed's ops are built for '8.0;9.0'; this GPU is 12.0"
    assert "torch_cuda_arch_list in containers/stacks/cpu.toml" in ops.fix
    assert only(results, "gpu: torch arch").status == "ok"


@pytest.mark.parametrize(
    ("stack", "fix"),
    [
        ("site", 'rebuild the ops for this GPU: make venv STACK=site TORCH_CUDA_ARCH_LIST="8.0;9.0"'),
        ("cuda13", 'add 8.0 to torch_cuda_arch_list in containers/stacks/cuda13.toml ("8.0;9.0") and rebuild'),
    ],
)
def test_ops_built_for_9_0_moved_to_an_8_0_gpu_fail_though_the_stack_lists_it(tmp_path: Path, stack: str, fix: str):
    """The GPU proof builds a site venv's ops for its GPU only (TORCH_CUDA_ARCH_LIST=9.0); the stack read later
    names torch's whole list. The record says what was built: an A100 gets no kernel, doctor fails."""
    built = venv_built_for(tmp_path / "venv", "9.0", stack)
    results = check_gpu(context(stack=cuda_stack(tmp_path, "8.0;9.0")), probe=fake((8, 0), built=built))
    ops = only(results, "gpu: ops arch")
    assert ops.status == "fail"
    assert ops.detail == "DeepSpeed's ops are built for '9.0' (recorded at build); this GPU is 8.0"
    assert fix in ops.fix
    without_record = check_gpu(context(stack=cuda_stack(tmp_path, "8.0;9.0")), probe=fake((8, 0)))
    assert only(without_record, "gpu: ops arch").status == "ok"


def test_ops_recorded_as_built_for_the_gpu_pass_though_the_stack_lacks_it(tmp_path: Path):
    built = venv_built_for(tmp_path / "venv", "8.0;9.0")
    results = check_gpu(context(stack=cuda_stack(tmp_path, "8.0")), probe=fake((9, 0), built=built))
    ops = only(results, "gpu: ops arch")
    assert (ops.status, ops.detail) == ("ok", "arch list recorded at build 8.0;9.0 covers 9.0")
    stack_only = check_gpu(context(stack=cuda_stack(tmp_path, "8.0")), probe=fake((9, 0)))
    assert only(stack_only, "gpu: ops arch").status == "fail"


def test_ptx_makes_it_a_warning(tmp_path: Path):
    results = check_gpu(context(stack=cuda_stack(tmp_path, "8.0;9.0+PTX")), probe=fake((10, 0)))
    assert only(results, "gpu: ops arch").status == "warn"


def test_a_gpu_torch_has_no_code_for_fails(tmp_path: Path):
    results = check_gpu(context(stack=cuda_stack(tmp_path, "7.0;8.0")), probe=fake((7, 0)))
    torch_arch = only(results, "gpu: torch arch")
    assert torch_arch.status == "fail" and torch_arch.detail.startswith("torch has no code for sm_70")
    results = check_gpu(
        context(stack=cuda_stack(tmp_path, "7.0;8.0")), probe=fake((7, 5), arch_list=("sm_80", "compute_70"))
    )
    torch_arch = only(results, "gpu: torch arch")
    assert torch_arch.status == "warn" and "JIT-compiled from PTX compute_70" in torch_arch.detail


def test_code_for_an_earlier_minor_version_runs(tmp_path: Path):
    """sm_80 code runs on an 8.6 GPU (an A40): binary compatibility within a major version."""
    results = check_gpu(context(stack=cuda_stack(tmp_path, "8.0")), probe=fake((8, 6)))
    assert [r.status for r in results] == ["ok", "ok", "ok", "ok"]
    results = check_gpu(context(stack=cuda_stack(tmp_path, "8.6")), probe=fake((8, 0)))
    assert only(results, "gpu: ops arch").status == "fail"  # but not backwards


def test_driver_versions(tmp_path: Path):
    stack = cuda_stack(tmp_path)
    older_major = only(check_gpu(context(stack=stack), probe=fake((9, 0), driver=(12, 8))), "gpu: driver")
    assert older_major.status == "fail"
    assert older_major.detail == "driver supports CUDA 12.8, torch's runtime is 13.0: too old"
    assert "update the NVIDIA driver" in older_major.fix
    info = GpuInfo("13.2", (("H100", (9, 0)),), TORCH_ARCHS, (13, 0))
    older_minor = only(check_gpu(context(stack=stack), probe=lambda: info), "gpu: driver")
    assert older_minor.status == "warn" and "minor version compatibility" in older_minor.detail


def test_no_gpu_on_a_cuda_stack_warns_and_fails_when_required(tmp_path: Path):
    stack = cuda_stack(tmp_path)
    nothing = lambda: GpuInfo("13.0", (), TORCH_ARCHS, None)  # noqa: E731
    results = check_gpu(context({"CUDA_VISIBLE_DEVICES": ""}, stack=stack), probe=nothing)
    assert [(r.name, r.status) for r in results] == [("gpu", "warn"), ("gpu: driver", "warn")]
    assert results[0].detail == "no GPU visible to torch (CUDA_VISIBLE_DEVICES=''); training would run on the CPU"
    assert "apptainer exec --nv" in results[0].fix
    results = check_gpu(context(stack=stack, require_gpu=True), probe=nothing)
    assert [(r.name, r.status) for r in results] == [("gpu", "fail"), ("gpu: driver", "fail")]
    assert only(results, "gpu: driver").detail == "no NVIDIA driver (libcuda.so.1 not found)"


def test_a_probe_that_raises_is_a_fail():
    def broken():
        raise ImportError("libtorch_cuda.so: cannot open shared object file")

    (result,) = check_gpu(context(), probe=broken)
    assert result.status == "fail" and "ImportError: libtorch_cuda.so" in result.detail


def test_parse_arch_list():
    assert parse_arch_list("8.0;9.0+PTX") == ({(8, 0), (9, 0)}, {(9, 0)})
    assert parse_arch_list("7.5 8.0 9.0a") == ({(7, 5), (8, 0), (9, 0)}, set())
    assert parse_arch_list("") == (set(), set())
