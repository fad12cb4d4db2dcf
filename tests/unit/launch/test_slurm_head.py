"""`launch --launcher srun` from a Slurm job's batch step: the steps it starts (one per host with restarts, one for
all without), its refusals, the probe's verdict from Slurm's view and a step of `true`, and the restart loop on
real processes (a fake `srun` and `scontrol` on PATH).

The namespace cluster's case (sbatch --no-kill, a node's every process SIGKILLed, its slurmd too) is
tests/cluster/test_launch_cluster.py::test_a_dead_node_of_a_slurm_job_is_left_out_and_the_job_restarts_on_the_others.
"""

from __future__ import annotations

import json
import time
from dataclasses import replace
from pathlib import Path

import pytest

from tests.unit.launch.test_head_restart import restarting_nodes
from tests.unit.launch.test_plan import PY, make_plan
from zerokit.foundations.errors import UserError
from zerokit.launch.command import Command
from zerokit.launch.config import parse
from zerokit.launch.restarts.probe import is_out, silent_in_job, slurm_verdicts

JOB = {"SLURM_JOB_ID": "4242", "SLURM_JOB_NODELIST": "node[1-3]", "PATH": "/venv/bin:/usr/bin", "HF_HOME": "/hf"}
LAUNCH = (PY, "-m", "zerokit", "launch")
TRAIN = (PY, "-m", "zerokit", "train")


def test_with_restarts_each_host_is_a_step_of_its_own_whose_launch_is_a_node_of_the_job():
    environ = {**JOB, "ZEROKIT_MAX_RESTARTS": "1", "ZEROKIT_MIN_NODES": "2", "ZEROKIT_LAUNCHER": "srun"}
    p = make_plan(["--nproc-per-node", "2", "--stop-grace", "5", "train"], environ)
    assert (p.mode, p.environment, p.hosts, p.world_size, p.main_address, p.main_port) == (
        "remote", "srun", ("node1", "node2", "node3"), 6, "node1", 24242)  # fmt: skip
    assert [c.host for c in p.commands] == ["node1", "node2", "node3"]
    assert p.commands[1].argv == (
        "srun", "--nodes", "1", "--ntasks", "1", "--nodelist", "node2", "--kill-on-bad-exit=0",
        "env", "-u", "ZEROKIT_LAUNCHER", "-u", "ZEROKIT_MAX_RESTARTS", "-u", "ZEROKIT_MIN_NODES",
        *LAUNCH, "--hosts", "node1,node2,node3", "--node-host", "node2", "--nproc-per-node", "2",
        "--master-addr", "node1", "--master-port", "24242", "--", *TRAIN,
    )  # fmt: skip
    # srun's steps inherit its environment: the variables for the nodes are set in it, not on the command line.
    assert p.commands[1].env == {"PATH": "/venv/bin:/usr/bin", "HF_HOME": "/hf", "ZEROKIT_STOP_GRACE": "5"}


def test_without_restarts_one_step_starts_every_node_and_a_failed_one_ends_it():
    p = make_plan(["--launcher", "srun", "--ifname", "ib1", "--", "sh", "x.sh"], JOB)
    (command,) = p.commands
    assert command.host is None
    assert command.argv == (
        "srun", "--nodes", "3", "--ntasks", "3", "--ntasks-per-node", "1", "--nodelist", "node1,node2,node3",
        "--kill-on-bad-exit=1", "env", *LAUNCH, "--nproc-per-node", "1", "--master-addr", "node1",
        "--master-port", "24242", "--ifname", "ib1", "--", "sh", "x.sh",
    )  # fmt: skip


def test_a_hostfile_picks_some_of_the_jobs_nodes(tmp_path):
    (tmp_path / "hosts").write_text("node3\nnode1\n")
    p = make_plan(["--launcher", "srun", "--hostfile", str(tmp_path / "hosts"), "--max-restarts", "1", "train"], JOB)
    assert (p.hosts, [c.host for c in p.commands]) == (("node3", "node1"), ["node3", "node1"])


@pytest.mark.parametrize(
    ("environ", "hosts", "message"),
    [
        ({"SLURM_JOB_NODELIST": "node[1-3]"}, "", "^--launcher srun starts a step per node of the Slurm job it "
         r"runs in, and this runs in none \(no SLURM_JOB_ID and SLURM_JOB_NODELIST\): run it in a job script "
         r"\(scripts/slurm/train-restart.sbatch\) or under salloc, or use --launcher pdsh --hostfile H$"),
        ({}, "", "this runs in none"),
        (JOB, "node1\nnode9\n", "^--hostfile names node9, not a node of Slurm job 4242 "
         r"\(node1,node2,node3\): list only the job's nodes, or drop --hostfile to run on all of them$"),
    ],
)  # fmt: skip
def test_outside_a_slurm_job_or_past_its_nodes_it_is_refused_in_one_line(tmp_path, environ, hosts, message):
    argv = ["--launcher", "srun", "--max-restarts", "1", "train"]
    if hosts:
        (tmp_path / "hosts").write_text(hosts)
        argv[2:2] = ["--hostfile", str(tmp_path / "hosts")]
    with pytest.raises(UserError, match=message):
        make_plan(argv, environ)


def test_min_nodes_counts_the_jobs_nodes():
    with pytest.raises(UserError, match="--min-nodes 4 is more than the 3 hosts of the Slurm job: lower it"):
        make_plan(["--launcher", "srun", "--max-restarts", "1", "--min-nodes", "4", "train"], JOB)


SHOWN = """\
NodeName=node1 Arch=x86_64 CoresPerSocket=1  CPUAlloc=1 CPUTot=2 State=MIXED ThreadsPerCore=1 CfgTRES=cpu=2,mem=1M
NodeName=node2 CPUAlloc=0 State=IDLE+DRAIN ThreadsPerCore=1 Reason=bad GPU [admin@2026-01-01T00:00:00] Comment=(null)
NodeName=node3 Arch=x86_64 CPUAlloc=1 State=MIXED+NOT_RESPONDING ThreadsPerCore=1
NodeName=node4 CPUAlloc=0 State=DOWN* ThreadsPerCore=1 Reason=Not responding [slurm@2026-01-01T00:05:00]
NodeName=node5 CPUAlloc=2 State=ALLOCATED+COMPLETING ThreadsPerCore=1
NodeName=node6 CPUAlloc=0 State=IDLE+FAIL ThreadsPerCore=1
"""  # scontrol's one-line records


def test_slurms_view_leaves_out_a_node_down_drained_failed_or_not_responding():
    assert slurm_verdicts(SHOWN) == {
        "node2": "Slurm: IDLE+DRAIN, bad GPU [admin@2026-01-01T00:00:00]",
        "node3": "Slurm: MIXED+NOT_RESPONDING",
        "node4": "Slurm: DOWN*, Not responding [slurm@2026-01-01T00:05:00]",
        "node6": "Slurm: IDLE+FAIL",
    }
    assert [is_out(s) for s in ("IDLE*", "MIXED+DRAINING", "ALLOCATED", "IDLE+POWERED_DOWN")] == [
        True, True, False, False]  # fmt: skip
    assert slurm_verdicts("") == {}  # scontrol failed: the steps alone answer


FAKE_SRUN = """#!/bin/sh
# The probe's step of `true` (srun --nodes 1 --ntasks 1 --nodelist HOST ... true): $HANGS hangs, node3 has no
# slurmd; any other srun runs its last word as a shell command (a job's step).
for last; do :; done
if [ "$last" = true ]; then
  [ "$6" = "${HANGS:-}" ] && exec sleep 30
  if [ "$6" = node3 ]; then
    echo "srun: error: Task launch for StepId=4242.7 failed on node node3: Communication connection failure" >&2
    echo "srun: error: Application launch failed: Communication connection failure" >&2
    exit 1
  fi
  exit 0
fi
exec sh -c "$last"
"""


def fake_slurm(tmp_path: Path, monkeypatch, shown: str) -> None:
    """`srun` as FAKE_SRUN, `scontrol` printing SHOWN."""
    folder = tmp_path / "bin"
    folder.mkdir()
    (folder / "srun").write_text(FAKE_SRUN)
    (folder / "scontrol").write_text(f"#!/bin/sh\ncat <<'EOF'\n{shown}EOF\n")
    for program in folder.iterdir():
        program.chmod(0o755)
    monkeypatch.setenv("PATH", f"{folder}:/usr/bin:/bin")


def test_a_host_slurm_has_out_is_not_waited_for_and_one_whose_step_fails_is_out(tmp_path, monkeypatch):
    """node2's step would hang, but Slurm has it drained: not waited for; node3's step fails (its slurmd gone),
    before slurmctld would call it NOT_RESPONDING."""
    fake_slurm(tmp_path, monkeypatch, SHOWN.splitlines(True)[1])
    monkeypatch.setenv("HANGS", "node2")
    started = time.monotonic()
    assert silent_in_job(("node1", "node2", "node3"), 10) == {
        "node2": "Slurm: IDLE+DRAIN, bad GPU [admin@2026-01-01T00:00:00]",
        "node3": "srun: error: Application launch failed: Communication connection failure",
    }
    assert time.monotonic() - started < 5


def test_a_step_that_does_not_end_within_the_bound_is_no_answer(tmp_path, monkeypatch):
    fake_slurm(tmp_path, monkeypatch, "")
    monkeypatch.setenv("HANGS", "node2")
    assert silent_in_job(("node1", "node2"), 1) == {"node2": "no answer within 1 s"}


def test_a_dead_node_of_the_job_is_left_out_and_its_steps_start_again_on_the_others(tmp_path, monkeypatch, capsys):
    """node1's step fails (its rank's collective with node3's failed), node2's is stopped (srun ends a stopped
    step's tasks with SIGKILL, and exits 137: not node2's fault), node3's step of `true` fails."""
    monkeypatch.chdir(tmp_path)
    fake_slurm(tmp_path, monkeypatch, "")
    out = tmp_path / "out"
    config = parse(["--launcher", "srun", "--max-restarts", "1", "--", "sh", "--output_dir", str(out)], JOB, PY)
    first = make_plan(["--launcher", "srun", "--max-restarts", "1", "--", "python", "x.py"], JOB)
    steps = {"node1": "exit 1", "node2": "trap 'exit 137' TERM; sleep 30 & wait", "node3": "sleep 30"}
    first = replace(first, commands=tuple(Command(("srun", steps[c.host]), {}, c.host) for c in first.commands))
    replans = []

    def replan(again, environ):
        replans.append(again.hosts_from_file)
        return replace(first, hosts=again.hosts_from_file, commands=(Command(("true",), {}),))

    assert restarting_nodes(first, config, replan) == 0
    assert replans == [("node1", "node2")]
    (event,) = json.loads((tmp_path / "out.launch-restarts.json").read_text())["events"]
    assert (event["nodes"], event["left_out"], event["hosts"]) == (["node3"], ["node3"], ["node1", "node2"])
    assert (
        "launch: srun to node1 exited with 1; node3 does not answer (srun: error: Application launch failed: "
        "Communication connection failure): a machine fault; node3 left out; restart 1 of 1 on 2 node(s) "
        "(node1,node2), as given; "
    ) in capsys.readouterr().err
