"""A command's whole tree of processes, found and ended: what a timeout must stop so that nothing is left running.

Killing the one process a caller started is not enough: torchrun, launch and DeepSpeed's launcher start ranks
that outlive their parent (reparented, still training or hung), and launch starts its ranks in sessions of
their own, so a process group does not hold them either. The tree is read from /proc's parent links while
it is still whole, then every member is signalled.

A hung Python process can still say where it is: under PYTHONFAULTHANDLER=1 (`STACKS_ENV`), SIGABRT makes
faulthandler print every thread's stack to the process's stderr before it dies. Cores are switched off
first (prlimit), so a dump does not leave a core file in the caller's working folder.
"""

from __future__ import annotations

import contextlib
import os
import resource
import signal
import time
from pathlib import Path

STACKS_ENV = {"PYTHONFAULTHANDLER": "1"}  # what a child needs for stop_tree(dump_stacks=True) to show its stacks


def parent_links(proc: Path = Path("/proc")) -> dict[int, int]:
    """{pid: parent pid} of every process visible now (one that ends while being read is left out)."""
    links = {}
    for entry in proc.iterdir():
        if not entry.name.isdigit():
            continue
        with contextlib.suppress(OSError, IndexError, ValueError):
            # stat's second field, the command name, may hold spaces and parentheses: split after its last ')'
            links[int(entry.name)] = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
    return links


def descendants(pid: int, proc: Path = Path("/proc")) -> list[int]:
    """Every process below `pid` (children first, then theirs), `pid` itself left out."""
    children: dict[int, list[int]] = {}
    for child, parent in parent_links(proc).items():
        children.setdefault(parent, []).append(child)
    found, queue = [], list(children.get(pid, []))
    while queue:
        current = queue.pop(0)
        found.append(current)
        queue.extend(children.get(current, []))
    return found


def stop_tree(pid: int, *, dump_stacks: bool = False, settle_s: float = 5.0) -> None:
    """End `pid` and everything below it with SIGKILL; with dump_stacks, SIGABRT them first and wait up to
    settle_s for faulthandler's stacks to be written (see the module's docstring)."""
    tree = [pid, *descendants(pid)]
    if dump_stacks:
        for member in tree:
            with contextlib.suppress(OSError):
                resource.prlimit(member, resource.RLIMIT_CORE, (0, 0))
                os.kill(member, signal.SIGABRT)
        deadline = time.monotonic() + settle_s
        while time.monotonic() < deadline and any(alive(member) for member in tree):
            time.sleep(0.1)
    for member in tree:
        with contextlib.suppress(OSError):
            os.kill(member, signal.SIGKILL)


def alive(pid: int) -> bool:
    """Whether `pid` still runs (a zombie, dead but not yet reaped, does not)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state not in ("Z", "X")
