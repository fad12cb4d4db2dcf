"""Fault tests' helpers: start zerokit as a user would, wait for its ranks, find what it left running.

Processes are found by a marker (digits unique to one test) in their argv, read from /proc, so a
test sees only its own.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Iterable
from pathlib import Path

from tests.conftest import REPO, default_stop_signals


def unique_marker() -> str:
    """Digits, so that it can also be the fraction of a `sleep` duration: `sleep 555.<marker>`."""
    return str(uuid.uuid4().int)[:15]


def processes_with(marker: str) -> list[str]:
    """ "pid: argv" of every live process (zombies have no argv) whose argv holds `marker`."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            argv = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:  # it ended meanwhile
            continue
        if marker in argv:
            found.append(f"{entry.name}: {argv.strip()}")
    return found


def strays(marker: str, settle: float = 3.0) -> list[str]:
    """Processes with `marker` still running after `settle` seconds (a SIGKILL lands at once, a
    stray stays)."""
    deadline = time.monotonic() + settle
    while (found := processes_with(marker)) and time.monotonic() < deadline:
        time.sleep(0.05)
    return found


def kill_all_with(marker: str) -> None:
    for line in processes_with(marker):
        with contextlib.suppress(ProcessLookupError):
            os.kill(int(line.split(":", 1)[0]), signal.SIGKILL)


def start_zerokit(args: list[str], env: dict[str, str]) -> subprocess.Popen:
    """`python -m zerokit ARGS` in the background with default stop signals, its output captured as text."""
    return subprocess.Popen(
        [sys.executable, "-m", "zerokit", *args],
        env=env,
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=default_stop_signals,
    )


def wait_for_files(paths: Iterable[Path], timeout: float = 60.0) -> None:
    """Until every file exists (ranks write one when they are ready for a signal)."""
    paths = list(paths)
    deadline = time.monotonic() + timeout
    while not all(path.exists() for path in paths):
        if time.monotonic() > deadline:
            raise AssertionError(f"not written within {timeout} s: {[str(p) for p in paths if not p.exists()]}")
        time.sleep(0.05)
