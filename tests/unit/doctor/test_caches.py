"""Caches: a non-writable extensions dir fails (for real: root ignores permissions, not read-only mounts)."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.unit.doctor.conftest import context, failures, only, run_main
from zerokit.doctor.caches import check_caches, mount_of

needs_root_mounts = pytest.mark.skipif(
    os.geteuid() != 0 or shutil.which("mount") is None, reason="a read-only bind mount needs root"
)


@pytest.fixture
def read_only_dir(tmp_path: Path):
    folder = tmp_path / "read-only"
    folder.mkdir()
    subprocess.run(["mount", "--bind", str(folder), str(folder)], check=True)
    try:
        subprocess.run(["mount", "-o", "remount,bind,ro", str(folder)], check=True)
        yield folder
    finally:
        subprocess.run(["umount", str(folder)], check=True)


@needs_root_mounts
def test_read_only_extensions_dir_fails(read_only_dir: Path, environ, capsys):
    environ["TORCH_EXTENSIONS_DIR"] = str(read_only_dir)
    result = only(check_caches(context(environ)), "cache: TORCH_EXTENSIONS_DIR")
    assert result.status == "fail"
    assert result.detail == f"{read_only_dir} is not writable (Read-only file system)"
    assert result.fix.startswith("point TORCH_EXTENSIONS_DIR at a writable directory: `export TORCH_EXTENSIONS_DIR=")

    code, rows = run_main(["--strict"], environ, capsys)
    assert code == 1
    assert failures(rows) == ["cache: TORCH_EXTENSIONS_DIR"]


@needs_root_mounts
def test_a_dir_to_be_created_under_a_read_only_one_fails(read_only_dir: Path, environ):
    environ["TRITON_CACHE_DIR"] = str(read_only_dir / "triton" / "cache")
    result = only(check_caches(context(environ)), "cache: TRITON_CACHE_DIR")
    assert result.status == "fail"
    assert result.detail.endswith(f"cannot be created in {read_only_dir} (Read-only file system)")


def test_a_file_where_the_extensions_dir_should_be_fails(tmp_path: Path, environ, capsys):
    blocker = tmp_path / "not-a-dir"
    blocker.write_text("")
    environ["TORCH_EXTENSIONS_DIR"] = str(blocker)
    result = only(check_caches(context(environ)), "cache: TORCH_EXTENSIONS_DIR")
    assert (result.status, result.detail) == ("fail", f"{blocker} is not a directory")
    environ["TORCH_EXTENSIONS_DIR"] = str(blocker / "below")
    result = only(check_caches(context(environ)), "cache: TORCH_EXTENSIONS_DIR")
    assert result.status == "fail" and "cannot be created" in result.detail


def test_writable_dirs_pass_and_missing_ones_that_can_be_created_too(tmp_path: Path, environ):
    environ["HF_HOME"] = str(tmp_path / "not-yet" / "huggingface")
    results = check_caches(context(environ))
    assert [(r.name, r.status) for r in results] == [
        ("cache: TORCH_EXTENSIONS_DIR", "ok"),
        ("cache: TRITON_CACHE_DIR", "ok"),
        ("cache: HF_HOME", "ok"),
    ]
    assert not (tmp_path / "not-yet").exists()  # judged, not created


def test_unset_extensions_dir_warns(environ):
    del environ["TORCH_EXTENSIONS_DIR"]
    result = only(check_caches(context(environ)), "cache: TORCH_EXTENSIONS_DIR")
    assert result.status == "warn" and "(default)" in result.detail and "shares and clobbers" in result.detail


def test_caches_on_a_network_filesystem_warn(tmp_path: Path, environ):
    """A stand-in /proc/mounts: there is no NFS or Lustre server here to mount."""
    mounts = tmp_path / "mounts"
    mounts.write_text(f"/dev/vda / ext4 rw 0 0\nfiler:/export {tmp_path} nfs4 rw,relatime 0 0\n")
    results = check_caches(context(environ), proc_mounts=mounts)
    assert {r.status for r in results} == {"warn"}
    extensions = only(results, "cache: TORCH_EXTENSIONS_DIR")
    assert f"is on nfs4 ({tmp_path})" in extensions.detail
    assert "node-local storage" in extensions.fix
    assert "once `prepare` filled it" in only(results, "cache: HF_HOME").fix


def test_mount_of_picks_the_longest_mount_point(tmp_path: Path):
    mounts = tmp_path / "mounts"
    mounts.write_text(
        "/dev/vda / ext4 rw 0 0\nfs:/ /lus lustre rw 0 0\ntmpfs /lus/tmp tmpfs rw 0 0\nfs:/ /lustre2 beegfs rw 0 0\n"
    )
    assert mount_of(Path("/lus/tmp/x"), mounts) == ("/lus/tmp", "tmpfs")
    assert mount_of(Path("/lus/x"), mounts) == ("/lus", "lustre")
    assert mount_of(Path("/lustre2/x"), mounts) == ("/lustre2", "beegfs")
    assert mount_of(Path("/lustre3"), mounts) == ("/", "ext4")
