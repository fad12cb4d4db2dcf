"""launch --max-restarts: which ends restart (a pure table), the command a restart runs, where faults are logged,
the setups refused; and real local ranks (sh) restarted after a SIGKILL, or not, or until restarts run out.

The e2e case (DeepSpeed ranks of train, one SIGKILLed after its first checkpoint) is tests/e2e/test_restart.py.
"""

from __future__ import annotations

import json
import signal
import sys
from pathlib import Path

import pytest

from tests.unit.launch.test_plan import make_plan
from zerokit.foundations.errors import UserError
from zerokit.foundations.restart_log import VARIABLE, inherited_events
from zerokit.launch.command import Command
from zerokit.launch.job import read_job, restarted
from zerokit.launch.restarts.loop import Attempt, log_path, restarting
from zerokit.launch.restarts.one_node import RankExits, SameHosts
from zerokit.launch.watch.exits import is_machine_fault
from zerokit.train.callbacks.preemption import INTERRUPT_EXIT_CODE, REQUEUE_EXIT_CODE

PY = "/venv/bin/python"


@pytest.mark.parametrize(
    "returncode",
    [-signal.SIGKILL, -signal.SIGSEGV, -signal.SIGBUS, -signal.SIGABRT, -signal.SIGILL, -signal.SIGFPE, 137, 139, 124],
)
def test_machine_faults_restart(returncode):
    assert is_machine_fault(returncode)


@pytest.mark.parametrize(
    "returncode",
    [
        0,
        1,  # RunFailure (a diverged loss, a full disk) or an unexpected exception
        UserError.exit_code,
        REQUEUE_EXIT_CODE,
        INTERRUPT_EXIT_CODE,
        126,
        127,
        -signal.SIGTERM,
        -signal.SIGINT,
        -signal.SIGHUP,
        128 + signal.SIGTERM,
        255,
    ],
)
def test_other_ends_do_not_restart(returncode):
    assert not is_machine_fault(returncode)


def restart_argv(argv: tuple[str, ...]) -> tuple[str, ...]:
    """The command a restart on as many nodes runs, written from the job's record."""
    return restarted(read_job(argv, {}), 1, 1).argv


def test_train_restarts_with_resume_auto_unless_its_command_says_what_to_resume():
    train = (PY, "-m", "zerokit", "train", "--config", "zero2")
    assert restart_argv(train) == (*train, "--resume", "auto")
    assert restart_argv((*train, "--resume", "runs/x/checkpoint-4")) == (*train, "--resume", "runs/x/checkpoint-4")
    assert restart_argv((*train, "--resume=auto")) == (*train, "--resume=auto")
    # Behind launch --check, each rank's command ends with the job's words, which a restart swaps.
    checked = (PY, "-m", "zerokit.healthcheck.rank", "--timeout", "60", "--", *train)
    job = read_job(train, {})
    again = SameHosts().start(Attempt((Command(checked, {}),), job), restarted(job, 1, 1), None, Path("log"))
    assert again.commands[0].argv == (*checked, "--resume", "auto")
    script = (PY, "my_loop.py", "--resume", "x")
    assert restart_argv(script) == script
    assert restart_argv((PY, "-m", "zerokit", "generate", "--model", "m")) == (
        PY,
        "-m",
        "zerokit",
        "generate",
        "--model",
        "m",
    )


def test_faults_are_logged_beside_the_output_folder_else_in_the_working_folder(tmp_path):
    assert log_path("runs/x", tmp_path) == tmp_path / "runs" / "x.launch-restarts.json"
    assert log_path(str(tmp_path / "y") + "/", Path("/elsewhere")) == tmp_path / "y.launch-restarts.json"
    assert log_path(None, tmp_path) == tmp_path / "launch-restarts.json"


@pytest.mark.parametrize(
    "argv, environ, where",
    [
        (["--hosts", "node1,node2", "--node-host", "node2", "--nproc-per-node", "2"], {}, "2 nodes"),
        (["--nproc-per-node", "2"], {"ZEROKIT_MAX_RESTARTS": "1", "SLURM_NTASKS": "2"}, None),
    ],
)
def test_restarts_are_refused_where_the_ranks_are_not_the_whole_job(argv, environ, where):
    """One node's launch of several (srun's, or a head-node launch's): the head node restarts the whole job
    (test_head_restart.py)."""
    if where is None:  # srun's one task of two nodes: the variable, as any flag
        from tests.unit.launch.test_plan import SLURM_RANK_3

        environ = {**SLURM_RANK_3, **environ, "SLURM_PROCID": "1", "SLURM_LOCALID": "0",
                   "SLURM_TASKS_PER_NODE": "1(x2)", "SLURM_STEP_TASKS_PER_NODE": "1(x2)"}  # fmt: skip
        where, flags = "2 nodes", argv
    else:
        flags = ["--max-restarts", "1", *argv]
    with pytest.raises(
        UserError, match=f"--max-restarts restarts the ranks launch starts, on one node .*this is {where}"
    ):
        make_plan([*flags, "--", "python", "x.py"], environ)


def test_max_restarts_is_a_whole_number():
    with pytest.raises(UserError, match="--max-restarts"):
        make_plan(["--max-restarts", "-1", "--", "python", "x.py"], {})
    assert make_plan(["--max-restarts", "2", "--nproc-per-node", "2", "--", "python", "x.py"], {}).mode == "spawn"


def restarting_here(commands: list[Command], max_restarts: int) -> int:
    """The restart loop with one node's strategies, over the commands (the job read from the first)."""
    first = Attempt(tuple(commands), read_job(commands[0].argv, {}))
    return restarting(first, RankExits(), SameHosts(), max_restarts, 5)


def ranks(tmp_path: Path, second: str) -> list[Command]:
    """Rank 0 waits for rank 1 (a file), rank 1 runs `second` (sh) and counts its starts; both see the log."""
    out = tmp_path / "out"
    wait = f"while [ ! -e {tmp_path}/done ]; do sleep 0.05; done"
    starts = f'echo x >> {tmp_path}/starts; echo "${{{VARIABLE}:-}}" >> {tmp_path}/logs'
    return [
        Command(("sh", "-c", wait, "sh", "--output_dir", str(out)), {"RANK": "0", "LOCAL_RANK": "0"}),
        Command(("sh", "-c", f"{starts}; {second}", "sh", "--output_dir", str(out)), {"RANK": "1", "LOCAL_RANK": "1"}),
    ]


def test_a_rank_killed_once_is_restarted_with_the_others_and_the_fault_logged(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    dies_first = f"if [ $(wc -l < {tmp_path}/starts) = 1 ]; then kill -KILL $$; fi; touch {tmp_path}/done"
    assert restarting_here(ranks(tmp_path, dies_first), max_restarts=2) == 0
    assert (tmp_path / "starts").read_text() == "x\nx\n"
    log = tmp_path / "out.launch-restarts.json"
    assert (tmp_path / "logs").read_text() == f"\n{log}\n"  # the restarted ranks are told where the log is
    (event,) = inherited_events({VARIABLE: str(log)})
    assert (event["rank"], event["exit"], event["restart"], event["max_restarts"]) == ("1", 137, 1, 2)
    assert event["cause"] == "was killed by SIGKILL (exit 137)" and event["resumes_from"] is None
    err = capsys.readouterr().err
    assert "launch: rank 1 (local 1) was killed by SIGKILL (exit 137): a machine fault; restart 1 of 2, as given" in err


def test_restarts_exhausted_end_the_job_in_one_line(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert restarting_here(ranks(tmp_path, "kill -SEGV $$"), max_restarts=1) == 128 + signal.SIGSEGV
    assert (tmp_path / "starts").read_text() == "x\nx\n"
    events = json.loads((tmp_path / "out.launch-restarts.json").read_text())["events"]
    assert [e["restart"] for e in events] == [1, None]
    err = capsys.readouterr().err
    assert (
        "launch: rank 1 (local 1) failed again (was killed by SIGSEGV (exit 139)); restarts exhausted (1 of 1): "
        f"no final model in {tmp_path / 'out'}: the run's outputs are incomplete; faults logged in "
        f"{tmp_path / 'out.launch-restarts.json'}\n"
    ) in err


@pytest.mark.parametrize("second", ["exit 2", "exit 1", f"exit {REQUEUE_EXIT_CODE}", "kill -TERM $$"])
def test_a_rank_that_ends_otherwise_is_not_restarted(tmp_path, monkeypatch, second):
    monkeypatch.chdir(tmp_path)
    code = restarting_here(ranks(tmp_path, f"touch {tmp_path}/done; {second}"), max_restarts=3)
    assert code == (128 + signal.SIGTERM if "TERM" in second else int(second.split()[1]))
    assert (tmp_path / "starts").read_text() == "x\n"
    assert not (tmp_path / "out.launch-restarts.json").exists()


def test_a_finished_run_is_not_restarted(tmp_path, monkeypatch):
    """A rank that aborts at exit after the model is written (issue 32): restarting would only be refused."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "model.safetensors").touch()
    assert restarting_here(ranks(tmp_path, "kill -ABRT $$"), max_restarts=3) == 128 + signal.SIGABRT
    assert (tmp_path / "starts").read_text() == "x\n"


def test_a_rank_killed_while_its_peer_fails_is_the_cause(tmp_path, monkeypatch):
    """Peers of a killed rank fail in their collectives a moment later: seen together, the kill is the cause."""
    monkeypatch.chdir(tmp_path)
    dead = tmp_path / "dead"
    fails_after = (  # once rank 1 is dead, as a collective would (and taking the sign away for the next try)
        f"import os, sys, time\nwhile not os.path.exists({str(dead)!r}): time.sleep(0.01)\n"
        f"os.remove({str(dead)!r}); sys.exit(1)"
    )
    peer = Command((sys.executable, "-c", fails_after), {"RANK": "0"})
    dies = f"echo x >> {tmp_path}/starts; sleep 0.3; touch {dead}; kill -KILL $$"
    killed = Command(("sh", "-c", dies), {"RANK": "1"})
    assert restarting_here([peer, killed], max_restarts=1) == 137  # restarted once, then exhausted
    assert (tmp_path / "starts").read_text() == "x\nx\n"
