"""Start K ranks of a command on this machine (what torchrun --standalone does), and wait for them.

plan_local() is pure: it returns the commands with their environments, which tests assert and
`launch --dry-run --json` prints. execute() runs them: if one rank fails, the others are stopped
and its exit code is returned.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from zerokit.launch.environment import free_port

STOP_GRACE_SECONDS = 10.0


@dataclass(frozen=True)
class Command:
    argv: tuple[str, ...]
    env: dict[str, str]  # variables set on top of the parent's environment


def plan_local(
    nproc: int, argv: Sequence[str], master_port: int, environ: Mapping[str, str], cpu_count: int
) -> list[Command]:
    """One Command per local rank: the torch.distributed variables and a fair share of the cores."""
    threads = environ.get("OMP_NUM_THREADS") or str(max(1, cpu_count // nproc))
    shared = {
        "WORLD_SIZE": str(nproc),
        "LOCAL_WORLD_SIZE": str(nproc),
        "MASTER_ADDR": environ.get("MASTER_ADDR", "127.0.0.1"),
        "MASTER_PORT": str(master_port),
        "OMP_NUM_THREADS": threads,
    }
    return [
        Command(argv=tuple(argv), env={**shared, "RANK": str(rank), "LOCAL_RANK": str(rank)}) for rank in range(nproc)
    ]


def execute(commands: Sequence[Command]) -> int:
    """Run every command at once; return 0 if all succeed, else the first failing exit code."""
    procs = [subprocess.Popen(c.argv, env={**os.environ, **c.env}) for c in commands]

    def forward(signum, _frame):  # pass Ctrl-C / scheduler signals on to every rank
        for proc in procs:
            if proc.poll() is None:
                proc.send_signal(signum)

    previous = {sig: signal.signal(sig, forward) for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGUSR1)}
    try:
        while True:
            codes = [p.poll() for p in procs]
            failed = [code for code in codes if code not in (None, 0)]
            if failed:
                _stop(procs)
                return failed[0]
            if all(code == 0 for code in codes):
                return 0
            time.sleep(0.2)
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def _stop(procs: Sequence[subprocess.Popen]) -> None:
    for proc in procs:
        if proc.poll() is None:
            proc.terminate()
    deadline = time.monotonic() + STOP_GRACE_SECONDS
    for proc in procs:
        try:
            proc.wait(timeout=max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def zerokit_argv(command: Sequence[str]) -> list[str]:
    """argv that runs a zerokit command (e.g. ["train", "--config", "zero3"]) with this Python."""
    return [sys.executable, "-m", "zerokit", *command]


def run_local(nproc: int, command: Sequence[str]) -> int:
    """Run a zerokit command as nproc local ranks."""
    plan = plan_local(nproc, zerokit_argv(command), free_port(), os.environ, os.cpu_count() or 1)
    return execute(plan)
