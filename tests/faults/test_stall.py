"""launch's stall watch (issue 28), with real processes: real launch, real torch.distributed (gloo, CPU ranks).

- a rank spinning outside any collective while its peer waits in all_reduce is named, with its script's
  file and line, and the job ends within the timeout plus a bound, every rank's stacks in one file;
- a job that keeps making progress for longer than the timeout is not ended;
- a rank whose peer never starts says so at the rendezvous, within the timeout, naming the missing rank;
- in exec mode (the ranks started by a scheduler, here torchrun's variables) the stuck rank names itself.
"""

from __future__ import annotations

import re
import socket
import sys
import time
from pathlib import Path

import pytest

from tests.conftest import run_zerokit
from tests.faults.processes import kill_all_with, start_zerokit, strays, unique_marker

# Start-up of launch and two torch ranks, the stacks, and the stop, on a loaded 2-core machine.
BOUND = 60
SPIN_MARK = "# the stuck rank spins here"
# argv: MARKER --output_dir OUT. Rank 1 never reaches the all_reduce that rank 0 waits in.
SPINNING = f"""
import sys
import torch
import torch.distributed as dist

dist.init_process_group("gloo")
if dist.get_rank() == 1:
    n = 0
    while True: n += 1  {SPIN_MARK}
dist.all_reduce(torch.ones(1))
"""
# argv: SECONDS MARKER: all_reduce after all_reduce for SECONDS (until one rank's time is up), then exit 0.
PROGRESSING = """
import sys, time
import torch
import torch.distributed as dist

dist.init_process_group("gloo")
end = time.monotonic() + float(sys.argv[1])
going = torch.ones(1)
while going.item():
    going = torch.tensor([float(time.monotonic() < end)])
    dist.all_reduce(going, op=dist.ReduceOp.MIN)
    time.sleep(0.05)
dist.destroy_process_group()
"""
JOINING = """
import torch.distributed as dist

dist.init_process_group("gloo")
"""


@pytest.fixture
def env(zk_env: dict[str, str]) -> dict[str, str]:
    return {**zk_env, "ZEROKIT_NO_PREFLIGHT": "1"}


@pytest.fixture
def marker():
    value = unique_marker()
    yield value
    kill_all_with(value)


def script(folder: Path, text: str) -> Path:
    path = folder / "job.py"
    path.write_text(text)
    return path


def spin_line(path: Path) -> int:
    return next(n for n, line in enumerate(path.read_text().splitlines(), 1) if SPIN_MARK in line)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def test_a_rank_spinning_outside_any_collective_is_named_and_the_job_ends(tmp_path, env, marker):
    """The done-when case: rank 1 spins, rank 0 waits in all_reduce; before, 30 minutes and rank 0 blamed."""
    job, out, timeout = script(tmp_path, SPINNING), tmp_path / "out", 10
    args = ["launch", "--stall-timeout", str(timeout), "--nproc-per-node", "2", "--", sys.executable, str(job)]
    started = time.monotonic()
    result = run_zerokit([*args, marker, "--output_dir", str(out)], env, timeout=timeout + BOUND + 30)
    seconds = time.monotonic() - started
    assert result.returncode == 124, result.stderr
    assert seconds < timeout + BOUND
    assert "stall timeout 10 s" in result.stderr  # the start-up lines say it
    last = result.stderr.strip().splitlines()[-1]
    where = f"{job}:{spin_line(job)}"
    assert re.fullmatch(
        rf"launch: stalled: no rank made progress for \d+ s; rank 1 \(node {re.escape(socket.gethostname())}, "
        rf"pid \d+\) is stuck at {re.escape(where)} outside any collective; rank 0 waits in all_reduce; "
        rf"stacks in {re.escape(str(out))}/zerokit-stall-\S+\.txt",
        last,
    ), result.stderr
    (stacks,) = out.glob("zerokit-stall-*.txt")
    text = stacks.read_text()
    assert "== rank 1 (local 1), pid " in text and f'File "{job}", line {spin_line(job)} in <module>' in text
    assert "== rank 0 (local 0), pid " in text and "in all_reduce" in text
    assert strays(marker) == []


def test_a_job_that_makes_progress_for_longer_than_the_timeout_is_not_ended(tmp_path, env, marker):
    job = script(tmp_path, PROGRESSING)
    args = ["launch", "--stall-timeout", "3", "--nproc-per-node", "2", "--", sys.executable, str(job), "5", marker]
    result = run_zerokit(args, env, timeout=BOUND + 30, cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert "stall" not in result.stderr.replace("stall timeout 3 s", "")
    assert list(tmp_path.glob("zerokit-stall-*")) == []


@pytest.mark.parametrize(("node", "missing"), [(0, 1), (1, 0)])
def test_a_rank_whose_peer_never_starts_says_so_at_the_rendezvous(tmp_path, env, marker, node, missing):
    """One node of two (as a pdsh launch starts it) whose other node never starts: rank 0, or a rank of another."""
    job, timeout = script(tmp_path, JOINING), 5
    hosts = ["127.0.0.1", "127.0.0.2"]
    args = [
        "launch", "--stall-timeout", str(timeout), "--hosts", ",".join(hosts), "--node-host", hosts[node],
        "--master-addr", "127.0.0.1", "--master-port", str(free_port()), "--", sys.executable, str(job), marker,
    ]  # fmt: skip
    started = time.monotonic()
    result = run_zerokit(args, env, timeout=timeout + BOUND + 30, cwd=tmp_path)
    assert result.returncode == 1, result.stderr
    assert time.monotonic() - started < timeout + BOUND
    errors = [line for line in result.stderr.splitlines() if line.startswith("error: rendezvous:")]
    assert len(errors) == 1, result.stderr
    if node == 0:
        assert f"rank 0 waited {timeout} s at 127.0.0.1:" in errors[0]
        assert "1 of 2 ranks arrived; missing: rank 1 " in errors[0]
    else:
        assert f"rank 1 of 2 waited {timeout} s for rank 0's store" in errors[0] and "missing: rank 0," in errors[0]
    assert "launch: rank " in result.stderr and "exited with 1" in result.stderr


def test_in_exec_mode_the_stuck_rank_names_itself(tmp_path, env, marker):
    """Ranks a scheduler started (torchrun's variables): launch execs into each, and each watches itself."""
    job, timeout = script(tmp_path, SPINNING), 10
    port = free_port()
    procs = []
    for rank in (0, 1):
        variables = {"RANK": str(rank), "LOCAL_RANK": str(rank), "WORLD_SIZE": "2", "LOCAL_WORLD_SIZE": "2"}
        variables |= {"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port), "ZEROKIT_STALL_TIMEOUT": str(timeout)}
        args = ["launch", "--", sys.executable, str(job), marker, "--output_dir", str(tmp_path / "out")]
        procs.append(start_zerokit(args, {**env, **variables}))
    started = time.monotonic()
    stuck = procs[1].communicate(timeout=timeout + BOUND)[1]
    assert procs[1].returncode == 124, stuck
    assert time.monotonic() - started < timeout + BOUND
    where = f"{job}:{spin_line(job)}"
    assert f"zerokit: stalled: rank 1 (node {socket.gethostname()}, pid " in stuck
    assert f"made no progress for {timeout} s and is stuck at {where} outside any collective; its stacks in " in stuck
    waiting = procs[0].communicate(timeout=BOUND)[1]
    assert procs[0].returncode != 0, waiting
    # Which of rank 0's ends comes first is a race of two clocks, and each names where rank 0 waited:
    # its own watch (124), or its all_reduce failing once rank 1 exited (1).
    own_watch = "zerokit: stalled: rank 0 " in waiting and "waits in all_reduce" in waiting
    failed = re.search(r"zerokit: rank 0 \(node .*\) waited \d+\.\d s in all_reduce until it failed", waiting)
    assert own_watch or failed, waiting
    assert (tmp_path / "out" / f"zerokit-stall-{socket.gethostname()}-rank-1.txt").is_file()
