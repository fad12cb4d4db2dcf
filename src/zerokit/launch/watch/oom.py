"""Whether the kernel's OOM killer ended a rank, from what the kernel tells: a pure function of numbers and text.

The OOM killer ends a process with SIGKILL (exit -9, or 137 through a shell or container runtime) and says so
in the kernel log (`Out of memory: Killed process PID (NAME) ... anon-rss:NkB, file-rss:NkB, shmem-rss:NkB`)
and in its memory cgroup's `oom_kill` count. launch reads both (zerokit.cluster.node_memory) and names the
cause instead of a bare SIGKILL: a kill line for the rank's process gives its size; a count that rose during
the run, without one, says only that the killer acted in the job's cgroup.
"""

from __future__ import annotations

import re
from collections.abc import Collection

GiB = 2**30
SIGKILL_EXITS = (-9, 137)  # Popen's return code for SIGKILL, and a shell's (or a container runtime's) 128 + 9
KILL_LINE = re.compile(
    r"Killed process (?P<pid>\d+) \((?P<name>[^)]*)\).*?anon-rss:(?P<anon>\d+)kB, "
    r"file-rss:(?P<file>\d+)kB, shmem-rss:(?P<shmem>\d+)kB"
)


def oom_cause(
    returncode: int,
    pids: Collection[int],
    kills_before: int | None,
    kills_after: int | None,
    kernel_log: str,
    limit: int,
) -> str | None:
    """How to say that the OOM killer ended the process of one of pids, or None when nothing shows it did.

    kills_before, kills_after: the memory cgroup's oom_kill count when the run started and after the rank ended
    (None: not readable); kernel_log: the kernel log's kill lines; limit: the bytes the job may hold."""
    if returncode not in SIGKILL_EXITS:
        return None
    lines = [match for match in KILL_LINE.finditer(kernel_log) if int(match.group("pid")) in pids]
    if lines:
        rss = sum(int(lines[-1].group(part)) for part in ("anon", "file", "shmem")) * 1024
        return f"was killed by the OOM killer: RSS {rss / GiB:.1f} GiB of {limit / GiB:.1f}"
    if kills_before is not None and kills_after is not None and kills_after > kills_before:
        return (
            f"was killed by the OOM killer (its memory cgroup's oom_kill count rose from {kills_before} to "
            f"{kills_after} during the run; the job may hold {limit / GiB:.1f} GiB)"
        )
    return None
