"""Caches: TORCH_EXTENSIONS_DIR, TRITON_CACHE_DIR and HF_HOME are writable, and preferably node-local.

A network filesystem works, but compiled extensions and Triton kernels race across nodes there, and
file locks (which the HF cache relies on) are unreliable on some of them.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from zerokit.doctor.context import Context
from zerokit.doctor.result import CheckResult, fail, ok, warn

PROC_MOUNTS = Path("/proc/mounts")
NETWORK_FILESYSTEMS = ("nfs", "nfs4", "lustre", "gpfs", "beegfs", "cifs", "smb3", "ceph", "fuse.glusterfs")


def cache_dirs(ctx: Context) -> list[tuple[str, Path, bool]]:
    """(variable, the directory it points at or the library's default, whether it is set)."""
    defaults = {
        "TORCH_EXTENSIONS_DIR": ctx.xdg_cache / "torch_extensions",
        "TRITON_CACHE_DIR": ctx.home / ".triton" / "cache",
        "HF_HOME": ctx.xdg_cache / "huggingface",
    }
    return [
        (var, Path(ctx.environ.get(var) or default), bool(ctx.environ.get(var))) for var, default in defaults.items()
    ]


def mount_of(path: Path, proc_mounts: Path = PROC_MOUNTS) -> tuple[str, str]:
    """(mount point, filesystem type) holding path: the longest mount point that is a prefix of it."""
    best = ("/", "unknown")
    for line in proc_mounts.read_text().splitlines():
        fields = line.split()
        if len(fields) < 3:
            continue
        point = fields[1].replace("\\040", " ")
        if (path == Path(point) or Path(point) in path.parents) and len(point) >= len(best[0]):
            best = (point, fields[2])
    return best


def existing_ancestor(path: Path) -> Path:
    while not path.exists() and path != path.parent:
        path = path.parent
    return path


def writable(path: Path) -> str:
    """Why path is not (and cannot become) a writable directory; "" when it is.

    An existing directory is written to for real: root passes any permission test, but not a read-only mount.
    """
    if path.exists():
        if not path.is_dir():
            return f"{path} is not a directory"
        try:
            with tempfile.TemporaryFile(dir=path):
                return ""
        except OSError as error:
            return f"{path} is not writable ({error.strerror})"
    base = existing_ancestor(path)
    if not base.is_dir():
        return f"{base} is not a directory, so {path} cannot be created"
    try:  # a real probe, as above: root passes os.access even on /proc or a read-only mount
        os.rmdir(tempfile.mkdtemp(dir=base))
    except OSError as error:
        return f"{path} does not exist and cannot be created in {base} ({error.strerror})"
    return ""


def check_caches(ctx: Context, *, proc_mounts: Path = PROC_MOUNTS) -> list[CheckResult]:
    results = []
    for var, path, is_set in cache_dirs(ctx):
        name = f"cache: {var}"
        where = f"{path}" + ("" if is_set else " (default)")
        problem = writable(path)
        if problem:
            results.append(fail(name, problem, f"point {var} at a writable directory: `export {var}=/tmp/$USER/...`"))
            continue
        point, fstype = mount_of(existing_ancestor(path).resolve(), proc_mounts)
        if fstype in NETWORK_FILESYSTEMS:
            results.append(
                warn(
                    name,
                    f"{where} is on {fstype} ({point}): slow, and shared by every node",
                    f"point {var} at node-local storage, e.g. `export {var}=/tmp/$USER/{var.lower()}`"
                    + (
                        " (HF_HOME on a shared filesystem is fine read-only, once `prepare` filled it)"
                        if var == "HF_HOME"
                        else ""
                    ),
                )
            )
        elif var == "TORCH_EXTENSIONS_DIR" and not is_set:
            results.append(
                warn(
                    name,
                    f"{where}: unset, so any JIT build goes to a cache every environment on this "
                    "machine shares and clobbers",
                    f"`export {var}=` a directory of this environment (the image and `make` set one)",
                )
            )
        else:
            results.append(ok(name, f"{where} ({fstype}), writable"))
    return results
