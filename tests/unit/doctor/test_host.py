"""/dev/shm, the CPU instruction set, and the memlock and open-files limits."""

from __future__ import annotations

import json
import mmap
import os
import resource
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.unit.doctor.conftest import REPO, context, failures, run_doctor
from zerokit.doctor.host import check_cpu_target, check_limits, check_shm, required_flags

needs_root_mounts = pytest.mark.skipif(
    os.geteuid() != 0 or shutil.which("unshare") is None, reason="mounting a tmpfs needs root and unshare"
)


@pytest.fixture
def tmpfs(tmp_path: Path):
    """Mount a tmpfs of a given size on a folder under tmp_path; unmounted afterwards."""
    mounted = []

    def mount(size: str) -> Path:
        point = tmp_path / f"shm-{size}"
        point.mkdir()
        subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(point)], check=True)
        mounted.append(point)
        return point

    yield mount
    for point in mounted:
        subprocess.run(["umount", str(point)], check=True)


@needs_root_mounts
def test_shm_of_64_mib_fails_naming_shm_size_and_ipc_host(tmpfs):
    (result,) = check_shm(context(), path=tmpfs("64m"))
    assert result.status == "fail"
    assert "64 MiB, less than 1 GiB" in result.detail
    assert "docker run --shm-size=8g" in result.fix and "--ipc=host" in result.fix
    assert "Apptainer uses the host's /dev/shm" in result.fix


@needs_root_mounts
def test_shm_of_2_gib_passes(tmpfs):
    (result,) = check_shm(context(), path=tmpfs("2g"))  # tmpfs size is a limit: nothing is allocated
    assert result.status == "ok"
    assert "2.0 GiB" in result.detail


def test_missing_shm_fails(tmp_path: Path):
    (result,) = check_shm(context(), path=tmp_path / "no-shm")
    assert result.status == "fail" and "--shm-size" in result.fix


@needs_root_mounts
def test_doctor_in_a_container_like_64_mib_shm_exits_1(environ):
    """The real /dev/shm, replaced by Docker's default size in a private mount namespace."""
    wrapper = ["unshare", "--mount", "sh", "-c", 'mount -t tmpfs -o size=64m tmpfs /dev/shm && exec "$@"', "sh"]
    result = run_doctor(["--strict", "--json"], environ, prefix=wrapper)
    assert result.returncode == 1, result.stderr
    rows = json.loads(result.stdout)
    assert failures(rows) == ["/dev/shm"]
    (row,) = [r for r in rows if r["name"] == "/dev/shm"]
    assert row["detail"] == "/dev/shm: 64 MiB, less than 1 GiB"
    assert "--shm-size=8g" in row["fix"]


def test_cpu_without_avx2_fails_for_a_v3_stack(tmp_path: Path):
    """A stand-in /proc/cpuinfo: this machine's CPU cannot be made older, and qemu-user does not fake cpuinfo."""
    cpuinfo = tmp_path / "cpuinfo"
    haswell_less = [f for f in required_flags("x86-64-v3") if f not in ("avx2", "fma")]
    cpuinfo.write_text(f"processor\t: 0\nflags\t\t: {' '.join(haswell_less)}\n")
    (result,) = check_cpu_target(context(), cpuinfo=cpuinfo)
    assert result.status == "fail"
    assert "lacks avx2, fma" in result.detail and "Illegal instruction" in result.detail
    assert "lower cpu_target in containers/stacks/cpu.toml" in result.fix


def test_this_cpu_runs_the_cpu_stack_ops():
    (result,) = check_cpu_target(context())
    assert result.status == "ok", result.detail
    assert result.detail.endswith("the stack's host ops need x86-64-v3")


def test_levels_include_the_levels_below():
    v3 = required_flags("x86-64-v3")
    assert {"sse2", "sse4_2", "avx2", "fma"} <= set(v3)
    assert "avx512f" not in v3 and "avx512f" in required_flags("x86-64-v4")


def test_low_open_files_limit_warns():
    """Really lowered in a child process, so this one keeps its limits."""
    code = (
        "import resource, json; from zerokit.doctor.host import check_limits; from zerokit.doctor import Context; "
        "from zerokit.image.stack import load_stack; "
        "print(json.dumps([r.as_dict() for r in check_limits(Context(load_stack('cpu')))]))"
    )
    _, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    result = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        env={"PYTHONPATH": str(REPO / "src")},
        preexec_fn=lambda: resource.setrlimit(resource.RLIMIT_NOFILE, (256, hard)),
    )
    rows = {row["name"]: row for row in json.loads(result.stdout)}
    assert rows["limit: nofile"]["status"] == "warn"
    assert rows["limit: nofile"]["detail"].startswith("256 open files")
    assert "ulimit -n" in rows["limit: nofile"]["fix"]


def test_memlock_unlimited_passes_and_limited_warns():
    unlimited = resource.RLIM_INFINITY
    limits = {resource.RLIMIT_MEMLOCK: (unlimited, unlimited), resource.RLIMIT_NOFILE: (65536, 65536)}
    assert [r.status for r in check_limits(context(), getrlimit=limits.__getitem__)] == ["ok", "ok"]
    limits[resource.RLIMIT_MEMLOCK] = (64 * 1024, 64 * 1024)
    memlock, _ = check_limits(context(), getrlimit=limits.__getitem__)
    assert memlock.status == "warn" and memlock.detail.startswith("64 KiB")
    assert "ulimit -l unlimited" in memlock.fix and "--ulimit memlock=-1" in memlock.fix


def test_deepspeed_segments_no_process_maps_are_named_with_the_command_that_removes_them(tmp_path: Path):
    uid = os.getuid()
    live, ended = (tmp_path / f"deepspeed_allreduce_buffer_{uid}_127.0.0.1_2950{i}_0" for i in (1, 2))
    for segment in (live, ended):
        segment.write_bytes(b"\0" * 2**20)
    with live.open("r+b") as file, mmap.mmap(file.fileno(), 0):  # a run still using its segment
        shm, left = check_shm(context(), path=tmp_path)
        ended.unlink()
        assert [row.status for row in check_shm(context(), path=tmp_path)] == ["ok"]
    assert shm.status == "ok"
    assert left.status == "warn" and left.detail.startswith("1 all-reduce segments (0.0 GiB)")
    assert f"rm {tmp_path}/deepspeed_allreduce_buffer_{uid}_*" in left.fix
