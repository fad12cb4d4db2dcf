"""What each fault cost a run that `launch --max-restarts` started again: steps lost, seconds to the next step.

Rank 0 notes the last step it finished, and when, in its output folder (PROGRESS_NAME, at most once per
NOTE_EVERY seconds, and at each checkpoint: the note may lag the fault by that much, never the checkpoint).
The run started again reads that note before it writes its own. The newest fault in launch's log
(zerokit.foundations.restart_log) gets:
- `reached_step`: the last step the stopped run noted;
- `steps_lost`: the steps past the checkpoint resumed from, trained again;
- once the new run's first step ends, `seconds_to_first_step`: time from that last noted step to the new first
  step. This covers the fault's detection, the stop, the probe, the start and the checkpoint's load.
- `seconds_seen_to_first_step`: the same, counted from when launch saw the fault.
Older faults keep the figures the run before wrote into its zerokit-run.json.
"""

from __future__ import annotations

import json
import time
from datetime import UTC, datetime
from pathlib import Path

from zerokit.foundations.files import write_json

PROGRESS_NAME = "zerokit-progress.json"
NOTE_EVERY = 1.0  # seconds between two notes of the step reached: a note per step would load a shared filesystem
FIGURES = ("reached_step", "steps_lost", "seconds_to_first_step", "seconds_seen_to_first_step")


class ProgressNote:
    """Rank 0's note of the last step finished, at most once per NOTE_EVERY seconds."""

    def __init__(self, folder: Path) -> None:
        self.path = folder / PROGRESS_NAME
        self.last = float("-inf")

    def step(self, step: int, saved: bool = False) -> None:
        """Note the step just finished; a saved one always (so the note never lags the newest checkpoint)."""
        if saved or time.monotonic() - self.last >= NOTE_EVERY:
            write_json(self.path, {"step": step, "at": now_precise()}, sort_keys=False)
            self.last = time.monotonic()


def now_precise() -> str:
    """Now in UTC, to the millisecond (provenance.now, which launch's events use, is to the second)."""
    return datetime.now(UTC).isoformat(timespec="milliseconds")


def read_progress(folder: Path) -> dict | None:
    """The stopped run's last note ({"step", "at"}), None when there is none."""
    try:
        note = json.loads((folder / PROGRESS_NAME).read_text())
        return {"step": int(note["step"]), "at": str(note["at"])}
    except (OSError, ValueError, KeyError, TypeError):
        return None


def with_lost_steps(events: list[dict], before: list[dict], progress: dict | None, resumed: int | None) -> list[dict]:
    """launch's events with their costs: each older one's from `before` (the run before's record), the newest's
    reached and lost steps from the stopped run's note and the step resumed from."""
    known = {(event.get("at"), event.get("restart")): event for event in before}
    costed = []
    for event in events:
        old = known.get((event.get("at"), event.get("restart")), {})
        costed.append({**event, **{name: old[name] for name in FIGURES if name in old}})
    newest = costed[-1] if costed else None
    if newest is not None and newest.get("restart") is not None and "reached_step" not in newest:
        reached = progress["step"] if progress else None
        newest.update(
            reached_step=reached,
            last_step_at=progress["at"] if progress else None,
            steps_lost=reached - (resumed or 0) if reached is not None else None,
        )
    return costed


def with_first_step(events: list[dict], at: datetime) -> bool:
    """The newest event's seconds to the first step after it (its run's first step ended `at`); whether it got them."""
    newest = events[-1] if events else None
    if newest is None or newest.get("restart") is None or "seconds_seen_to_first_step" in newest:
        return False
    if newest.get("last_step_at"):
        newest["seconds_to_first_step"] = round(
            (at - datetime.fromisoformat(newest["last_step_at"])).total_seconds(), 1
        )
    newest["seconds_seen_to_first_step"] = round((at - datetime.fromisoformat(newest["at"])).total_seconds(), 1)
    return True
