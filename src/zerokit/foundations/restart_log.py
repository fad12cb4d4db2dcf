"""launch's log of faults and restarts (`launch --max-restarts`), and how a restarted rank finds it.

launch writes the log (zerokit.launch.restarts.loop) and names it to the ranks it restarts in ZEROKIT_LAUNCH_RESTARTS;
`train`'s run record (zerokit.train.callbacks.run_record) copies its events into zerokit-run.json.
No dependencies: launch imports it before torch, the run record under it.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path

from zerokit.foundations.files import write_json

VARIABLE = "ZEROKIT_LAUNCH_RESTARTS"


def read_events(path: Path) -> list[dict]:
    """The log's events, oldest first; none when there is no log (or it cannot be read)."""
    try:
        return list(json.loads(path.read_text())["events"])
    except (OSError, ValueError, KeyError, TypeError):
        return []


def write_events(path: Path, events: list[dict]) -> None:
    """The whole log, atomically: a reader sees the events before this one was added, or with it."""
    write_json(path, {"events": events}, sort_keys=False)


def inherited_events(environ: Mapping[str, str]) -> list[dict]:
    """The events of the log launch named to this rank; none for a rank that launch did not restart."""
    path = environ.get(VARIABLE)
    return read_events(Path(path)) if path else []
