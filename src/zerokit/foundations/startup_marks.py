"""Start-up marks: wall-clock moments a run passes on its way to the first step, for `bench`'s breakdown.

A process records `mark(phase)` as each phase of its start-up ends; `launch` passes its own
marks to the ranks it starts (in ZEROKIT_STARTUP_MARKS), and the StepClock writes them all, with
the moment the process itself started, into the rank's timings file. No dependencies: launch
and train both import it before torch.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Mapping, MutableMapping
from pathlib import Path

VARIABLE = "ZEROKIT_STARTUP_MARKS"
_marks: list[tuple[str, float]] = []


def mark(phase: str) -> None:
    """Phase `phase` ended now."""
    _marks.append((phase, time.time()))


def process_started(pid: int | str = "self") -> float | None:
    """When a process started (wall clock, to 10 ms), from /proc; None where there is no /proc.

    Its start in ticks since boot, against the uptime now (/proc/stat's boot time is whole seconds).
    """
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        uptime = float(Path("/proc/uptime").read_text().split()[0])
        now = time.time()
    except (OSError, IndexError, ValueError):
        return None
    return now - (uptime - int(fields[19]) / os.sysconf("SC_CLK_TCK"))  # field 22 of stat: starttime in ticks


def inherited(environ: Mapping[str, str]) -> list[tuple[str, float]]:
    """The marks a launching process passed down (empty when none or unreadable)."""
    try:
        return [(str(name), float(at)) for name, at in json.loads(environ.get(VARIABLE, "[]"))]
    except (ValueError, TypeError):
        return []


def pass_on(environ: MutableMapping[str, str], prefix: str) -> None:
    """Put this process's start and marks (names prefixed) into environ, for the processes it starts."""
    environ[VARIABLE] = json.dumps(inherited(environ) + own_marks(prefix))


def recorded(prefix: str, environ: Mapping[str, str]) -> list[tuple[str, float]]:
    """Every mark of this process and the ones before it, oldest first; this one's names prefixed."""
    return sorted(inherited(environ) + own_marks(prefix), key=lambda m: m[1])


def own_marks(prefix: str) -> list[tuple[str, float]]:
    started = process_started()
    return ([(f"{prefix}started", started)] if started else []) + [(f"{prefix}{n}", t) for n, t in _marks]
