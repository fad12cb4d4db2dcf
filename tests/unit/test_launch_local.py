"""Local ranks: the plan is exact, and a failing rank brings the others down with its exit code."""

from __future__ import annotations

import sys
import time

from zerokit.launch.local import Command, execute, plan_local


def test_plan_gives_each_rank_its_variables_and_a_share_of_the_cores():
    plan = plan_local(2, ["python", "x.py"], master_port=29511, environ={}, cpu_count=8)
    assert plan == [
        Command(
            ("python", "x.py"),
            {
                "WORLD_SIZE": "2",
                "LOCAL_WORLD_SIZE": "2",
                "MASTER_ADDR": "127.0.0.1",
                "MASTER_PORT": "29511",
                "OMP_NUM_THREADS": "4",
                "RANK": "0",
                "LOCAL_RANK": "0",
            },
        ),
        Command(
            ("python", "x.py"),
            {
                "WORLD_SIZE": "2",
                "LOCAL_WORLD_SIZE": "2",
                "MASTER_ADDR": "127.0.0.1",
                "MASTER_PORT": "29511",
                "OMP_NUM_THREADS": "4",
                "RANK": "1",
                "LOCAL_RANK": "1",
            },
        ),
    ]


def test_user_thread_count_wins_and_never_zero_threads():
    assert plan_local(1, ["x"], 1, {"OMP_NUM_THREADS": "3"}, 8)[0].env["OMP_NUM_THREADS"] == "3"
    assert plan_local(4, ["x"], 1, {}, 2)[0].env["OMP_NUM_THREADS"] == "1"


def test_every_rank_runs_with_its_rank(tmp_path):
    script = "import os, pathlib; e = os.environ; pathlib.Path(e['OUT'], e['RANK']).write_text(e['WORLD_SIZE'])"
    plan = [
        Command((sys.executable, "-c", script), {**c.env, "OUT": str(tmp_path)})
        for c in plan_local(3, ["unused"], 29512, {}, 2)
    ]
    assert execute(plan) == 0
    assert {p.name: p.read_text() for p in tmp_path.iterdir()} == {"0": "3", "1": "3", "2": "3"}


def test_a_failing_rank_stops_the_others_and_its_code_is_returned():
    hang = Command((sys.executable, "-c", "import time; time.sleep(60)"), {})
    fail = Command((sys.executable, "-c", "import sys; sys.exit(7)"), {})
    started = time.monotonic()
    assert execute([hang, fail]) == 7
    assert time.monotonic() - started < 30
