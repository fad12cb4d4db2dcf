"""Running local ranks: each gets its variables, and a failing rank brings the others down with its exit code."""

from __future__ import annotations

import sys
import time

from zerokit.launch.local import Command, execute_commands


def test_every_rank_runs_with_its_variables(tmp_path):
    script = "import os, pathlib; e = os.environ; pathlib.Path(e['OUT'], e['RANK']).write_text(e['WORLD_SIZE'])"
    plan = [
        Command((sys.executable, "-c", script), {"RANK": str(r), "WORLD_SIZE": "3", "OUT": str(tmp_path)})
        for r in range(3)
    ]
    assert execute_commands(plan) == 0
    assert {p.name: p.read_text() for p in tmp_path.iterdir()} == {"0": "3", "1": "3", "2": "3"}


def test_a_failing_rank_stops_the_others_and_its_code_is_returned():
    hang = Command((sys.executable, "-c", "import time; time.sleep(60)"), {})
    fail = Command((sys.executable, "-c", "import sys; sys.exit(7)"), {})
    started = time.monotonic()
    assert execute_commands([hang, fail]) == 7
    assert time.monotonic() - started < 30
