"""What a fault cost a restarted run (zerokit.train.callbacks.fault_cost): the steps lost counted from the
stopped run's note, the seconds to the first step after it, and older faults' figures kept from the run before.
A rank killed and restarted for real: tests/e2e/test_restart.py."""

from __future__ import annotations

from datetime import UTC, datetime

from zerokit.train.callbacks.fault_cost import ProgressNote, read_progress, with_first_step, with_lost_steps

FIRST = {"at": "2026-01-01T10:00:00+00:00", "restart": 1, "nodes": ["node3"]}
SECOND = {"at": "2026-01-01T11:00:00+00:00", "restart": 2, "nodes": ["node2"]}


def test_the_newest_fault_loses_the_steps_noted_past_the_checkpoint_resumed(tmp_path):
    note = ProgressNote(tmp_path)
    note.step(7)
    note.step(8)  # within a second of the last: not noted
    assert read_progress(tmp_path)["step"] == 7
    note.step(8, saved=True)  # a checkpoint's step always is
    progress = read_progress(tmp_path)
    assert progress["step"] == 8
    (event,) = with_lost_steps([FIRST], [], {"step": 11, "at": progress["at"]}, 8)
    assert (event["reached_step"], event["steps_lost"], event["nodes"]) == (11, 3, ["node3"])
    (event,) = with_lost_steps([FIRST], [], None, 8)  # the stopped run noted nothing (an older zerokit)
    assert (event["reached_step"], event["steps_lost"]) == (None, None)


def test_older_faults_keep_the_figures_the_run_before_recorded():
    before = [{**FIRST, "reached_step": 5, "steps_lost": 1, "seconds_to_first_step": 20.5}]
    first, second = with_lost_steps([FIRST, SECOND], before, {"step": 9, "at": "2026-01-01T10:59:58+00:00"}, 8)
    assert (first["steps_lost"], first["seconds_to_first_step"]) == (1, 20.5)
    assert (second["reached_step"], second["steps_lost"]) == (9, 1)
    seen = datetime(2026, 1, 1, 11, 0, 30, tzinfo=UTC)
    assert with_first_step([first, second], seen)
    assert (second["seconds_to_first_step"], second["seconds_seen_to_first_step"]) == (32.0, 30.0)
    assert not with_first_step([first, second], seen)  # once
    assert not with_first_step([{**FIRST, "restart": None}], seen)  # the fault that ended the job: no first step
