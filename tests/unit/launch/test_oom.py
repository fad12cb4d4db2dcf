"""A rank the kernel's OOM killer ended is named as such (zerokit.launch.watch.oom), not as a bare SIGKILL."""

from __future__ import annotations

import sys

from zerokit.cluster.node_memory import meminfo
from zerokit.launch.command import Command
from zerokit.launch.watch import supervisor
from zerokit.launch.watch.oom import oom_cause
from zerokit.launch.watch.supervisor import execute_commands

GiB = 2**30
KERNEL_LOG = (
    "6,1234,5678,-;Out of memory: Killed process 4242 (python3) total-vm:30000000kB, anon-rss:23000000kB, "
    "file-rss:800000kB, shmem-rss:0kB, UID:0 pgtables:45000kB oom_score_adj:0"
)


def test_a_kill_line_for_the_rank_gives_its_size():
    cause = oom_cause(-9, {4242}, None, None, KERNEL_LOG, 24 * GiB)
    assert cause == "was killed by the OOM killer: RSS 22.7 GiB of 24.0"
    assert oom_cause(137, {4242}, 3, 3, KERNEL_LOG, 24 * GiB) == cause  # through a shell or container runtime


def test_a_count_that_rose_during_the_run_says_so_without_a_size():
    cause = oom_cause(-9, {7}, 2, 3, "", 24 * GiB)
    assert cause.startswith("was killed by the OOM killer (its memory cgroup's oom_kill count rose from 2 to 3")


def test_nothing_is_blamed_on_the_oom_killer_without_evidence():
    assert oom_cause(-9, {7}, 3, 3, KERNEL_LOG, 24 * GiB) is None  # another process's kill, the count unchanged
    assert oom_cause(-9, {7}, None, None, "", 24 * GiB) is None  # nothing readable
    assert oom_cause(1, {4242}, 0, 1, KERNEL_LOG, 24 * GiB) is None  # not a SIGKILL
    assert oom_cause(-6, {4242}, 0, 1, KERNEL_LOG, 24 * GiB) is None


def test_launch_names_the_rank_the_oom_killer_ended(monkeypatch, capsys):
    counts = iter([0, 1])  # before the ranks start, after the rank died
    monkeypatch.setattr(supervisor.node_memory, "oom_kills", lambda: next(counts))
    monkeypatch.setattr(supervisor.node_memory, "kernel_kill_records", lambda: "")
    monkeypatch.setattr(supervisor.node_memory, "memory_limit", lambda: 24 * GiB)
    hang = Command((sys.executable, "-c", "import time; time.sleep(60)"), {"RANK": "0", "LOCAL_RANK": "0"})
    killed = Command(("sh", "-c", "kill -KILL $$"), {"RANK": "1", "LOCAL_RANK": "1"})
    assert execute_commands([hang, killed], stop_grace=5) == 137
    err = capsys.readouterr().err
    assert "launch: rank 1 (local 1) was killed by the OOM killer (its memory cgroup's oom_kill count rose" in err
    assert "SIGKILL" not in err.split("stopping the other ranks")[0]


def test_meminfo_reads_bytes():
    fields = meminfo("MemTotal:       24684084 kB\nMemAvailable:   23302708 kB\nHugePages_Total:       0\n")
    assert fields == {"MemTotal": 24684084 * 1024, "MemAvailable": 23302708 * 1024, "HugePages_Total": 0}
