"""A bench run that hangs ends, bounded, with its stacks: issue 61 (a rank of the plain HF run wrote its model,
then never exited, and `make bench` waited forever)."""

from __future__ import annotations

import sys
import textwrap
from pathlib import Path

import pytest

from tests.faults.processes import strays, unique_marker
from zerokit.bench import runner
from zerokit.bench.plan import Run
from zerokit.foundations.errors import UserError

# A "rank" that writes its timings, starts a child of its own, and then waits forever in a function named for it.
HANGS_AT_EXIT = """
import pathlib, subprocess, sys, time
timings = pathlib.Path(sys.argv[1])
timings.mkdir(parents=True)
(timings / "rank-0.json").write_text("{}")
subprocess.Popen(["sleep", "555.{marker}"])
def waits_forever_at_exit():
    while True:
        time.sleep(1)
waits_forever_at_exit()
"""


def a_run(tmp_path: Path, script: str, marker: str) -> Run:
    folder = tmp_path / "run"
    argv = (sys.executable, "-c", textwrap.dedent(script).replace("{marker}", marker), str(folder / "timings"))
    return Run("plain-2", "overhead", "plain", 1, 1, (*argv, "--max_steps", "3"), folder)


def test_a_run_that_trained_and_never_ends_is_stopped_with_its_stacks(tmp_path, monkeypatch):
    monkeypatch.setattr(runner, "EXIT_ALLOWANCE_S", 1)
    marker = unique_marker()
    run = a_run(tmp_path, HANGS_AT_EXIT, marker)
    with pytest.raises(UserError) as stopped:
        runner.execute(run, warmup_steps=0, hosts=())
    log = run.folder / "log.txt"
    assert str(stopped.value) == (
        "bench run plain-2 hung: its ranks had trained and written their timings, and 1 s later it had not ended; "
        f"stopped, its stacks are in {log}"
    )
    assert "in waits_forever_at_exit" in log.read_text()  # faulthandler's stack of the hung process
    assert strays(marker) == []  # its child too: the whole tree


def test_a_run_past_its_time_limit_is_stopped(tmp_path, monkeypatch):
    monkeypatch.setattr(runner, "STARTUP_ALLOWANCE_S", 1)
    monkeypatch.setattr(runner, "STEP_ALLOWANCE_S", 0)
    marker = unique_marker()
    run = a_run(tmp_path, f"import time; time.sleep(555.{marker})", marker)
    with pytest.raises(UserError, match=r"bench run plain-2 hung: it had not ended after 1 s \(bench --run-timeout; "
                       r"default 1 s to start, 0 s for each of 3 steps\); stopped"):  # fmt: skip
        runner.execute(run, warmup_steps=0, hosts=())
    assert strays(marker) == []
    run = a_run(tmp_path / "given", f"import time; time.sleep(555.{marker})", marker)
    with pytest.raises(UserError, match=r"hung: it had not ended after 0.5 s \(bench --run-timeout"):
        runner.execute(run, warmup_steps=0, hosts=(), limit_s=0.5)
    assert strays(marker) == []
