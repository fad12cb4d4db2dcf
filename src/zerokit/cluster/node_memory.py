"""This node's memory, as the kernel tells it: what a job may still take, its limit, and its OOM kills.

A job's limit is its memory cgroup's (a Slurm job's `--mem`, a container's) when that is below the node's
memory: cgroup v2 (`memory.max`, `memory.events`) or v1 (`memory.limit_in_bytes`, `memory.oom_control`).
Inside a container /proc/self/cgroup can name a path its cgroup mount does not show; the mount's root is
then the container's own cgroup. Every reader returns None where the kernel does not tell.
"""

from __future__ import annotations

import contextlib
import errno
import os
import re
import subprocess
from pathlib import Path

CGROUP_ROOT = Path("/sys/fs/cgroup")
UNLIMITED = 2**60  # cgroup v1 writes "no limit" as a page-rounded 2**63 - 1
KILL_RECORD = "Killed process"  # the OOM killer's line in the kernel log


def meminfo(text: str) -> dict[str, int]:
    """/proc/meminfo's fields in bytes."""
    fields = {}
    for line in text.splitlines():
        name, _, rest = line.partition(":")
        number, *unit = rest.split()
        fields[name] = int(number) * (1024 if unit == ["kB"] else 1)
    return fields


def cgroup_dir(proc_self_cgroup: str) -> tuple[Path, int] | None:
    """This process's memory cgroup folder and its version (2 or 1), from /proc/self/cgroup's text."""
    for line in proc_self_cgroup.splitlines():
        _, controllers, path = line.split(":", 2)
        if controllers == "":
            folder, version = CGROUP_ROOT / path.lstrip("/"), 2
        elif "memory" in controllers.split(","):
            folder, version = CGROUP_ROOT / "memory" / path.lstrip("/"), 1
        else:
            continue
        root = CGROUP_ROOT if version == 2 else CGROUP_ROOT / "memory"
        probe = "memory.max" if version == 2 else "memory.limit_in_bytes"
        for candidate in (folder, root):
            if (candidate / probe).is_file():
                return candidate, version
    return None


def _cgroup() -> tuple[Path, int] | None:
    with contextlib.suppress(OSError):
        return cgroup_dir(Path("/proc/self/cgroup").read_text())
    return None


def _read(path: Path) -> str | None:
    with contextlib.suppress(OSError):
        return path.read_text()
    return None


def cgroup_limit() -> tuple[int, int] | None:
    """(limit, bytes in use that the kernel cannot reclaim) of this process's memory cgroup; None: no limit."""
    found = _cgroup()
    if found is None:
        return None
    folder, version = found
    names = ("memory.max", "memory.current", "inactive_file") if version == 2 else (
        "memory.limit_in_bytes", "memory.usage_in_bytes", "total_inactive_file")  # fmt: skip
    limit, usage, stat = _read(folder / names[0]), _read(folder / names[1]), _read(folder / "memory.stat") or ""
    if limit is None or usage is None or limit.strip() == "max" or int(limit) >= UNLIMITED:
        return None
    inactive = re.search(rf"^{names[2]} (\d+)$", stat, re.MULTILINE)
    return int(limit), int(usage) - (int(inactive.group(1)) if inactive else 0)


def host_available() -> int:
    """Bytes this job may still take: MemAvailable, or what its cgroup's limit leaves when that is less."""
    available = meminfo(Path("/proc/meminfo").read_text())["MemAvailable"]
    limited = cgroup_limit()
    return min(available, limited[0] - limited[1]) if limited else available


def memory_limit() -> int:
    """The most this job may hold: its cgroup's limit, or the node's memory."""
    total = meminfo(Path("/proc/meminfo").read_text())["MemTotal"]
    limited = cgroup_limit()
    return min(total, limited[0]) if limited else total


def oom_kills() -> int | None:
    """How many processes the OOM killer has ended in this cgroup (its `oom_kill` count); None: not told."""
    found = _cgroup()
    if found is None:
        return None
    folder, version = found
    text = _read(folder / ("memory.events" if version == 2 else "memory.oom_control")) or ""
    count = re.search(r"^oom_kill (\d+)$", text, re.MULTILINE)
    return int(count.group(1)) if count else None


def kernel_kill_records() -> str:
    """The kernel log's OOM kill lines, from /dev/kmsg or `dmesg`; empty where neither is readable."""
    lines = []
    with contextlib.suppress(OSError):
        fd = os.open("/dev/kmsg", os.O_RDONLY | os.O_NONBLOCK)
        try:
            while True:
                try:
                    record = os.read(fd, 8192)
                except BlockingIOError:  # the end of the log
                    break
                except OSError as error:  # EPIPE: records overwritten while reading; read on
                    if error.errno != errno.EPIPE:
                        raise
                    continue
                lines.append(record.decode(errors="replace"))
        finally:
            os.close(fd)
    if not lines:
        with contextlib.suppress(OSError, subprocess.SubprocessError):
            done = subprocess.run(["dmesg"], capture_output=True, text=True, timeout=5, check=False)
            lines = done.stdout.splitlines()
    return "\n".join(line.rstrip("\n") for line in lines if KILL_RECORD in line)
