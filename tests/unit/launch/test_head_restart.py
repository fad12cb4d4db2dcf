"""launch --max-restarts from the head node: the pure parts (the hosts a restart runs on, the --min-nodes line,
the logged event, the plans and refusals), and the restart loop on real processes (sh for each host's pdsh, a
fake `ssh` answering the probe); a node's launch stopping its ranks when the head's connection closes.

The namespace cluster's case (pdsh over real sshd, a node's processes SIGKILLed) is
tests/cluster/test_launch_cluster.py::test_a_dead_node_is_left_out_and_the_job_restarts_on_the_others.
"""

from __future__ import annotations

import json
import signal
import socket
import subprocess
import sys
import textwrap
import threading
import time
from dataclasses import replace
from pathlib import Path

import pytest

from tests.unit.launch.test_plan import PY, make_plan
from zerokit.foundations.errors import UserError
from zerokit.foundations.restart_log import VARIABLE
from zerokit.launch.command import Command
from zerokit.launch.config import LaunchConfig, parse
from zerokit.launch.job import read_job, restarted
from zerokit.launch.plan import Plan
from zerokit.launch.restarts.head_node import (
    NodeExits,
    NodeFault,
    Replan,
    Survivors,
    next_hosts,
    restart_config,
    too_few_line,
    wait_for_port,
)
from zerokit.launch.restarts.loop import Attempt, Next, restarting
from zerokit.launch.restarts.probe import probe_for

REFUSED = "ssh: connect to host node3 port 22: Connection refused"


def restarting_nodes(first: Plan, config: LaunchConfig, replan: Replan) -> int:
    """The restart loop with the head's strategies, as launch runs it from the head node."""
    attempt = Attempt(first.commands, read_job(config.target, {}), first.hosts, first.spares)
    sight, hosts = NodeExits(probe_for(config.launcher)), Survivors(config, replan, {})
    return restarting(attempt, sight, hosts, config.max_restarts, config.stop_grace)


def rescaled_argv(argv: tuple[str, ...], nodes: int, first_nodes: int) -> tuple[str, ...]:
    """The command of a restart on `nodes` nodes of a job first started on `first_nodes` (not resumed: as given)."""
    return restarted(read_job((*argv, "--resume", "x"), {}), nodes, first_nodes).argv[:-2]


def hostfile(tmp_path: Path, hosts: str = "node1\nnode2\nnode3\n") -> str:
    path = tmp_path / "hosts"
    path.write_text(hosts)
    return str(path)


def test_a_restart_runs_on_the_hosts_that_answer_a_spare_in_the_place_of_each_host_left_out(tmp_path):
    hosts = ("node1", "node2", "node3", "node4")

    def after(job: tuple[str, ...], spares: tuple[str, ...], left_out: dict[str, str]):
        where = next_hosts(job, spares, left_out)
        return where.hosts, where.spares

    assert after(hosts, (), {"node3": REFUSED}) == (("node1", "node2", "node4"), ())
    assert after(hosts, (), {"node1": REFUSED, "node4": REFUSED}) == (("node2", "node3"), ())
    assert after(hosts, (), {}) == (hosts, ())
    spared = (hosts[:2], hosts[2:])  # --nnodes 2
    assert after(*spared, {"node1": REFUSED}) == (("node2", "node3"), ("node4",))
    assert next_hosts(*spared, {"node1": REFUSED}).joined == ("node3",)
    assert after(*spared, {"node2": REFUSED, "node3": REFUSED}) == (("node1", "node4"), ())
    assert after(*spared, {"node3": REFUSED}) == (("node1", "node2"), ("node4",))  # a dead spare is dropped
    assert after(*spared, {h: REFUSED for h in hosts[1:]}) == (("node1",), ())  # no spare left: it shrinks


def test_nnodes_runs_the_job_on_the_first_hosts_and_keeps_the_others_spare(tmp_path):
    hosts = hostfile(tmp_path)
    p = make_plan(["--launcher", "pdsh", "--hostfile", hosts, "--nnodes", "2", "--max-restarts", "1", "train"], {})
    assert (p.hosts, p.spares, p.world_size, [c.host for c in p.commands]) == (
        ("node1", "node2"), ("node3",), 2, ["node1", "node2"])  # fmt: skip
    assert "--hosts node1,node2 " in p.commands[0].argv[-1]
    with pytest.raises(UserError, match="--nnodes 4 is more than the 3 hosts of the hostfile: lower it"):
        make_plan(["--launcher", "pdsh", "--hostfile", hosts, "--nnodes", "4", "train"], {})
    with pytest.raises(UserError, match="--nnodes 2 picks the hosts of a head-node launch: add --launcher"):
        make_plan(["--nproc-per-node", "2", "train"], {"ZEROKIT_NNODES": "2"})


def test_the_survivors_strategy_says_where_the_restart_runs_and_when_too_few_answer(tmp_path):
    argv = ["--launcher", "pdsh", "--hostfile", hostfile(tmp_path), "--max-restarts", "1", "--min-nodes", "2", "train"]
    config = parse(argv, {}, PY)
    survivors = Survivors(config, lambda again, environ: make_plan(argv, environ), {})
    attempt = Attempt((), read_job(config.target, {}), ("node1", "node2"), ("node3",))
    fault = NodeFault(("node2",), {"node2": REFUSED}, 255, "pdsh to node2 exited with 255")
    where = survivors.after(attempt, fault)
    assert (where.hosts, where.spares, where.joined) == (("node1", "node3"), (), ("node3",))
    assert survivors.words(where) == ("node2 left out, spare node3 in its place; ", " on 2 node(s) (node1,node3)")
    assert survivors.too_few(attempt, where, fault) is None
    assert survivors.too_few(attempt, Next(("node1",)), fault) == too_few_line(1, 2, 2, fault.cause)


def test_too_few_nodes_is_one_line_naming_the_count_and_the_cause():
    assert too_few_line(2, 3, 3, f"node3 does not answer ({REFUSED})") == (
        f"2 of 3 nodes answer, fewer than --min-nodes 3: node3 does not answer ({REFUSED}); not restarted"
    )


def test_a_node_fault_is_logged_with_its_nodes_cause_restart_and_the_hosts_it_ran_on():
    fault = NodeFault(("node3",), {"node3": REFUSED}, 255, "pdsh to node3 exited with 255; node3 does not answer")
    event = fault.event(1, 2, "runs/x/checkpoint-2", Next(("node1", "node2")))
    assert {k: v for k, v in event.items() if k != "at"} == {
        "nodes": ["node3"],
        "cause": "pdsh to node3 exited with 255; node3 does not answer",
        "exit": 255,
        "left_out": ["node3"],
        "restart": 1,
        "max_restarts": 2,
        "resumes_from": "runs/x/checkpoint-2",
        "hosts": ["node1", "node2"],
        "spares_joined": [],
    }
    assert fault.event(None, 2, None, Next(("node1", "node2")))["hosts"] is None  # not restarted
    assert fault.event(1, 2, None, Next(("node1", "node4"), joined=("node4",)))["spares_joined"] == ["node4"]
    # Ranks killed on a node that still answers: named, and nothing left out.
    assert NodeFault(("node2",), {}, 137, "pdsh to node2 exited with 137").nodes == ("node2",)


def test_with_restarts_pdsh_starts_each_host_alone_and_the_nodes_never_restart(tmp_path):
    environ = {"ZEROKIT_MAX_RESTARTS": "1", "ZEROKIT_MIN_NODES": "2", "ZEROKIT_CACHE": "/c"}
    p = make_plan(["--launcher", "pdsh", "--hostfile", hostfile(tmp_path), "--stop-grace", "5", "train"], environ)
    assert [(c.host, c.argv[c.argv.index("-w") + 1]) for c in p.commands] == [(h, h) for h in p.hosts]
    line = p.commands[2].argv[-1]
    assert "--hosts node1,node2,node3 --node-host %h --stop-when-stdin-closes" in line
    assert "ZEROKIT_CACHE=/c" in line and "MAX_RESTARTS" not in line and "MIN_NODES" not in line
    assert "ZEROKIT_STOP_GRACE=5" in line  # each node stops its ranks within the head's grace
    mpirun = make_plan(["--launcher", "mpirun", "--hostfile", hostfile(tmp_path), "train"], environ)
    (command,) = mpirun.commands  # every rank at once: mpirun ends them all when one dies
    assert command.host is None and "ZEROKIT_MAX_RESTARTS=1" not in command.argv


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--min-nodes", "2", "--nproc-per-node", "2"], "--min-nodes 2 is the fewest nodes a head-node launch"),
        (["--min-nodes", "2", "--launcher", "pdsh", "--hostfile", "HOSTS"], "add --launcher pdsh|mpirun"),
        (["--max-restarts", "1", "--min-nodes", "4", "--launcher", "pdsh", "--hostfile", "HOSTS"],
         "--min-nodes 4 is more than the 3 hosts of the hostfile: lower it"),
        (["--max-restarts", "1", "--launcher", "mpirun", "--hostfile", "HOSTS", "--print-command"],
         "nothing would restart it: drop --max-restarts"),
    ],
)  # fmt: skip
def test_min_nodes_and_restarts_are_refused_where_they_cannot_act(tmp_path, argv, message):
    argv = [hostfile(tmp_path) if word == "HOSTS" else word for word in argv]
    with pytest.raises(UserError, match=message):
        make_plan([*argv, "--", "python", "x.py"], {})


def test_a_restart_resumes_train_on_the_hosts_left_and_checks_them_again(tmp_path):
    argv = ["--launcher", "pdsh", "--hostfile", hostfile(tmp_path), "--check", "train", "--gradient_accumulation_steps"]
    config = parse([*argv, "2"], {}, PY)
    again = restart_config(config, restarted(read_job(config.target, {}), 2, 3), ("node1", "node2"), ("node4",))
    assert again.hosts_from_file == ("node1", "node2", "node4")  # the spare stays behind the job's hosts
    assert again.target == (PY, "-m", "zerokit", "train", "--gradient_accumulation_steps", "3", "--resume", "auto")
    assert again.check.target == again.target


def test_a_restart_on_fewer_nodes_keeps_the_global_batch_with_more_accumulation():
    """3 nodes x accumulation 2 is 2 nodes x 3; where no whole number does, train names the sizes that would."""
    train = (PY, "-m", "zerokit", "train", "--max_steps", "8")
    assert rescaled_argv((*train, "--gradient_accumulation_steps", "2"), 2, 3)[-1] == "3"
    assert rescaled_argv((*train, "--gradient-accumulation-steps=4"), 1, 2)[-1] == "--gradient-accumulation-steps=8"
    assert rescaled_argv((*train, "--gradient_accumulation_steps", "1"), 2, 3)[-1] == "1"
    assert rescaled_argv(train, 2, 3) == train  # not given: train sets it
    script = (PY, "loop.py", "--gradient_accumulation_steps", "2")
    assert rescaled_argv(script, 2, 3) == script


def test_a_restart_waits_until_the_stopped_jobs_store_is_gone():
    store = socket.create_server(("127.0.0.1", 0))
    threading.Timer(0.5, store.close).start()
    started = time.monotonic()
    wait_for_port("127.0.0.1", store.getsockname()[1], 10)
    assert 0.4 < time.monotonic() - started < 5


def fake_ssh(tmp_path: Path, monkeypatch, silent: str) -> None:
    """`ssh ... HOST true` that answers for every host but `silent` (none: ''); `pdsh SCRIPT` that runs it."""
    folder = tmp_path / "bin"
    folder.mkdir()
    (folder / "ssh").write_text(f'#!/bin/sh\nif [ "$5" = "{silent}" ]; then echo "{REFUSED}" >&2; exit 255; fi\n')
    (folder / "pdsh").write_text('#!/bin/sh\nexec sh -c "$1"\n')
    for program in folder.iterdir():
        program.chmod(0o755)
    monkeypatch.setenv("PATH", f"{folder}:/usr/bin:/bin")


def head_job(tmp_path: Path, node3: str, *flags: str, failing: str = "node3"):
    """A pdsh job of 3 hosts whose pdsh runs `node3` on the failing host and waits to be stopped on the others;
    and the replan, which records the hosts and log each restart got and runs `true` on each host."""
    out = tmp_path / "out"
    argv = ["--launcher", "pdsh", "--hostfile", hostfile(tmp_path), "--max-restarts", "1", *flags]
    config = parse([*argv, "--", "sh", "-c", "x", "sh", "--output_dir", str(out)], {}, PY)
    first = make_plan([*argv, "--", "python", "x.py"], {})
    commands = tuple(Command(("pdsh", node3 if c.host == failing else "sleep 30"), {}, c.host) for c in first.commands)
    replans: list[tuple[tuple[str, ...], str]] = []

    def replan(again, environ):
        replans.append((again.hosts_from_file, environ[VARIABLE]))
        return replace(
            first, hosts=again.hosts_from_file, commands=tuple(Command(("true",), {}, h) for h in again.hosts_from_file)
        )

    return replace(first, commands=commands), config, replan, replans


def test_a_node_that_died_is_left_out_and_the_job_restarts_on_the_others(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    fake_ssh(tmp_path, monkeypatch, "node3")
    first, config, replan, replans = head_job(tmp_path, "exit 255")
    assert restarting_nodes(first, config, replan) == 0
    log = tmp_path / "out.launch-restarts.json"
    assert replans == [(("node1", "node2"), str(log))]  # the restarted ranks are told where the log is
    (event,) = json.loads(log.read_text())["events"]
    assert (event["nodes"], event["left_out"], event["hosts"], event["restart"]) == (
        ["node3"], ["node3"], ["node1", "node2"], 1)  # fmt: skip
    err = capsys.readouterr().err
    assert "launch: pdsh to node3 exited with 255; stopping the other ranks\n" in err
    assert (
        f"launch: pdsh to node3 exited with 255; node3 does not answer ({REFUSED}): a machine fault; node3 left out; "
        f"restart 1 of 1 on 2 node(s) (node1,node2), as given; faults logged in {log}\n"
    ) in err


def test_a_spare_named_in_advance_takes_the_place_of_a_node_that_died(tmp_path, monkeypatch, capsys):
    """--nnodes 2 of 3 hosts: node2 dies, node3 (the spare) joins; the job keeps its 2 nodes."""
    monkeypatch.chdir(tmp_path)
    fake_ssh(tmp_path, monkeypatch, "node2")
    first, config, replan, replans = head_job(tmp_path, "exit 255", "--nnodes", "2", failing="node2")
    assert restarting_nodes(first, config, replan) == 0
    assert [hosts for hosts, _ in replans] == [("node1", "node3")]
    (event,) = json.loads((tmp_path / "out.launch-restarts.json").read_text())["events"]
    assert (event["left_out"], event["hosts"], event["spares_joined"]) == (["node2"], ["node1", "node3"], ["node3"])
    assert ": a machine fault; node2 left out, spare node3 in its place; restart 1 of 1 on 2 node(s) (node1,node3)" in (
        capsys.readouterr().err
    )


def test_below_min_nodes_the_job_ends_in_one_line(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    fake_ssh(tmp_path, monkeypatch, "node3")
    first, config, replan, replans = head_job(tmp_path, "exit 255", "--min-nodes", "3")
    assert restarting_nodes(first, config, replan) == 255
    assert replans == []
    assert (
        f"launch: 2 of 3 nodes answer, fewer than --min-nodes 3: pdsh to node3 exited with 255; node3 does not "
        f"answer ({REFUSED}); not restarted: no final model in {tmp_path / 'out'}: the run's outputs are incomplete; "
        f"faults logged in {tmp_path / 'out.launch-restarts.json'}\n"
    ) in capsys.readouterr().err
    (event,) = json.loads((tmp_path / "out.launch-restarts.json").read_text())["events"]
    assert (event["restart"], event["hosts"]) == (None, None)


def test_ranks_killed_on_a_node_that_answers_restart_on_every_host(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    fake_ssh(tmp_path, monkeypatch, "")
    first, config, replan, replans = head_job(tmp_path, "exit 137")
    assert restarting_nodes(first, config, replan) == 0
    assert [hosts for hosts, _ in replans] == [("node1", "node2", "node3")]
    assert (
        "launch: pdsh to node3 exited with 137: a machine fault; restart 1 of 1 on 3 node(s)" in capsys.readouterr().err
    )


def test_a_node_failing_again_after_the_last_restart_ends_the_job_in_one_line(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    fake_ssh(tmp_path, monkeypatch, "")
    first, config, _, _ = head_job(tmp_path, "exit 137")
    assert restarting_nodes(first, config, lambda again, environ: first) == 137  # node3's ranks die again
    events = json.loads((tmp_path / "out.launch-restarts.json").read_text())["events"]
    assert [event["restart"] for event in events] == [1, None]
    assert (
        "launch: node3 failed again (pdsh to node3 exited with 137); restarts exhausted (1 of 1): no final model in "
    ) in capsys.readouterr().err


@pytest.mark.parametrize("node3", ["exit 1", "exit 2"])
def test_a_failure_where_every_node_answers_is_not_restarted(tmp_path, monkeypatch, node3):
    """A diverged loss (1), a user error (2): the same run fails the same way again."""
    monkeypatch.chdir(tmp_path)
    fake_ssh(tmp_path, monkeypatch, "")
    first, config, replan, replans = head_job(tmp_path, node3)
    first = replace(first, commands=tuple(replace(c, argv=("pdsh", node3)) for c in first.commands))
    assert restarting_nodes(first, config, replan) == int(node3.split()[1])
    assert replans == [] and not (tmp_path / "out.launch-restarts.json").exists()


NODE_LAUNCH = """
import sys
from zerokit.launch.command import Command
from zerokit.launch.watch.supervisor import execute_commands, stop_when_stdin_closes
stop_when_stdin_closes()
rank = ("sh", "-c", "echo started >&2; exec sleep 30")
sys.exit(execute_commands([Command(rank, {"RANK": "1", "LOCAL_RANK": "0"})], 5))
"""


def test_a_node_launch_stops_its_ranks_when_the_head_connection_closes():
    """Under pdsh, a node's stdin is the head's connection: its end (the head's pdsh stopped or gone) stops the
    ranks as a scheduler's SIGTERM does (train checkpoints where it still can), instead of leaving them to train on
    unsupervised."""
    node = subprocess.Popen([sys.executable, "-c", textwrap.dedent(NODE_LAUNCH)], stdin=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)  # fmt: skip
    assert node.stderr.readline().endswith("started\n")
    node.stdin.close()
    assert node.wait(timeout=20) == 128 + signal.SIGTERM
    err = node.stderr.read()
    assert "launch: stdin closed: the head node's launch is gone; stopping the ranks\n" in err
    assert "launch: got SIGTERM: passed it to 1 rank(s)" in err
