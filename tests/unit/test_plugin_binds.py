"""The host's NCCL net plugin bound into the container: the libraries `ldd` names, less the image's own, and the
job scripts' words with a real plugin compiled here."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from tests.unit.fake_nccl_plugin import build, needs_gcc
from zerokit.image.plugin_binds import DEPS_MOUNT, PLUGIN_MOUNT, host_libraries, ldd_libraries, options, plugin_file

REPO = Path(__file__).resolve().parents[2]
# `ldd` of aws-ofi-nccl on a Slingshot node, as it prints it.
SLINGSHOT_LDD = """\
\tlinux-vdso.so.1 (0x00007ffd6b5f2000)
\tlibfabric.so.1 => /opt/cray/libfabric/1.20.1/lib64/libfabric.so.1 (0x00007f2b8c400000)
\tlibhwloc.so.15 => /usr/lib64/libhwloc.so.15 (0x00007f2b8c3a0000)
\tlibstdc++.so.6 => /usr/lib64/libstdc++.so.6 (0x00007f2b8c000000)
\tlibm.so.6 => /lib64/libm.so.6 (0x00007f2b8bf00000)
\tlibgcc_s.so.1 => /lib64/libgcc_s.so.1 (0x00007f2b8bee0000)
\tlibc.so.6 => /lib64/libc.so.6 (0x00007f2b8bc00000)
\tlibcxi.so.1 => /usr/lib64/libcxi.so.1 (0x00007f2b8bbe0000)
\tlibcuda.so.1 => /usr/lib64/libcuda.so.1 (0x00007f2b89000000)
\tlibpthread.so.0 => /lib64/libpthread.so.0 (0x00007f2b88e00000)
\t/lib64/ld-linux-x86-64.so.2 (0x00007f2b8c800000)
"""


def test_ldd_lines_become_names_and_paths():
    assert ldd_libraries("\tlibx.so.1 => not found\n\t/lib64/ld-linux-x86-64.so.2 (0x1)\nstatically linked\n") == [
        ("libx.so.1", None),
        ("/lib64/ld-linux-x86-64.so.2", "/lib64/ld-linux-x86-64.so.2"),
    ]


def test_the_host_libraries_to_bind_leave_glibc_the_cxx_runtime_and_the_driver_to_the_image():
    assert host_libraries(SLINGSHOT_LDD, "p.so") == [
        ("libfabric.so.1", "/opt/cray/libfabric/1.20.1/lib64/libfabric.so.1"),
        ("libhwloc.so.15", "/usr/lib64/libhwloc.so.15"),
        ("libcxi.so.1", "/usr/lib64/libcxi.so.1"),
    ]


def test_a_library_the_host_does_not_find_is_named():
    with pytest.raises(ValueError, match=r"on this host p.so needs libfabric.so.1, which ldd does not find: load"):
        host_libraries("\tlibfabric.so.1 => not found\n", "p.so")


def test_a_folder_must_hold_one_plugin(tmp_path: Path):
    (tmp_path / "libnccl-net-ofi.so").write_bytes(b"")
    (tmp_path / "libnccl-net.so").symlink_to("libnccl-net-ofi.so")
    assert plugin_file(str(tmp_path)).name in ("libnccl-net-ofi.so", "libnccl-net.so")  # one file, two names
    (tmp_path / "libnccl-net-sharp.so").write_bytes(b"")
    with pytest.raises(ValueError, match=r"it holds libnccl-net-ofi\.so, libnccl-net-sharp\.so, libnccl-net\.so"):
        plugin_file(str(tmp_path))
    with pytest.raises(ValueError, match="no such file or folder"):
        plugin_file(str(tmp_path / "nothing"))


def test_options_bind_the_plugins_real_folder_and_each_library_by_its_soname(tmp_path: Path):
    real = tmp_path / "lib" / "libnccl-net-ofi.so"
    real.parent.mkdir()
    real.write_bytes(b"")
    (tmp_path / "libnccl-net.so").symlink_to(real)
    assert options(tmp_path / "libnccl-net.so", SLINGSHOT_LDD)[:4] == [
        "--bind", f"{real.parent}:{PLUGIN_MOUNT}",
        "--bind", f"/opt/cray/libfabric/1.20.1/lib64/libfabric.so.1:{DEPS_MOUNT}/libfabric.so.1",
    ]  # fmt: skip
    assert options(real, SLINGSHOT_LDD)[-2:] == ["--env", f"ZEROKIT_NCCL_PLUGIN={PLUGIN_MOUNT}/libnccl-net-ofi.so"]


@needs_gcc
def test_the_job_scripts_bind_a_real_plugin_and_its_fabric_library(tmp_path: Path):
    fake = build(tmp_path)
    script = 'source scripts/container.sh && container_words /job && printf "%s\\n" "${run[@]}"'
    env = {"PATH": "/usr/bin:/bin", "CONTAINER": "apptainer", "IMAGE": "x.sif", "ZEROKIT_DIR": str(REPO),
           "ZEROKIT_NCCL_PLUGIN": str(fake.plugin.parent), "LD_LIBRARY_PATH": str(fake.fabric)}  # fmt: skip
    result = subprocess.run(["bash", "-c", script], cwd=REPO, env=env, capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == [
        "apptainer", "exec", "--nv",
        "--bind", "/job:/job",
        "--bind", f"{fake.plugin.parent}:{PLUGIN_MOUNT}",
        "--bind", f"{os.path.realpath(fake.fabric / 'libfakefabric.so.1')}:{DEPS_MOUNT}/libfakefabric.so.1",
        "--env", f"ZEROKIT_NCCL_PLUGIN={PLUGIN_MOUNT}/libnccl-net-fake.so",
        "--pwd", "/job", "x.sif",
    ]  # fmt: skip
    without = subprocess.run(
        ["bash", "-c", script], cwd=REPO, env={**env, "LD_LIBRARY_PATH": ""}, capture_output=True, text=True
    )
    assert without.returncode == 2
    assert "needs libfakefabric.so.1, which ldd does not find" in without.stderr.strip().splitlines()[0]
