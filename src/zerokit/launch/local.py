"""Run the local ranks of a plan at once and wait for them (what torchrun does on a node).

If one rank fails, the others are stopped and its exit code is returned; SIGINT, SIGTERM and
SIGUSR1 (Slurm's --signal) are passed on to every rank.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from collections.abc import Sequence
from dataclasses import dataclass

STOP_GRACE_SECONDS = 10.0


@dataclass(frozen=True)
class Command:
    argv: tuple[str, ...]
    env: dict[str, str]  # variables set on top of the parent's environment


def execute_commands(commands: Sequence[Command]) -> int:
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
