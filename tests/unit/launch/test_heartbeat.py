"""launch --node-timeout: the head's watch of its nodes' heartbeats (real sockets on loopback), and the
supervisor ending the command of a node counted lost (real processes). A node cut off on the namespace
cluster: tests/cluster/test_node_partition.py."""

from __future__ import annotations

import socket
import time

from zerokit.launch.command import Command
from zerokit.launch.job import read_job
from zerokit.launch.watch.heartbeat import HeartbeatWatch, head_address, send_heartbeats
from zerokit.launch.watch.supervisor import supervise


def wait_for(condition, seconds: float = 10) -> None:
    deadline = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < deadline
        time.sleep(0.05)


def test_a_node_heard_from_then_silent_is_counted_lost_once_and_one_that_ended_never():
    watch = HeartbeatWatch(["127.0.0.1"])
    port = int(watch.address.rpartition(":")[2])
    try:
        send_heartbeats(f"127.0.0.1:{port}", "node1")  # a node's launch, beating every second
        cut = socket.create_connection(("127.0.0.1", port))  # a node cut off: its last beat, then silence
        cut.sendall(b"node2\n.")
        ended = socket.create_connection(("127.0.0.1", port))  # a node's launch that ended
        ended.sendall(b"node3\n.")
        wait_for(lambda: {"node1", "node2", "node3"} <= watch.last.keys())
        ended.close()
        wait_for(lambda: "node3" not in watch.last)
        time.sleep(1.6)
        silent = watch.silent(1.5)
        assert list(silent) == ["node2"] and silent["node2"] > 1.5
        assert watch.silent(1.5) == {}  # said once
        cut.close()
    finally:
        watch.close()


def test_the_head_address_is_the_one_the_hosts_reach():
    assert head_address(["127.0.0.1"]) == socket.gethostname()  # loopback only: the host's name
    assert head_address(["no-such-host.invalid", "127.0.0.1"]) == socket.gethostname()


def test_the_command_of_a_node_counted_lost_is_ended_and_the_job_stops_as_for_a_failed_node(capsys):
    commands = [Command(("sleep", "30"), {}, host) for host in ("node1", "node2")]
    lost = iter([{}, {"node2": 30.4}])
    code, supervisor = supervise(commands, read_job(("sleep", "30"), {}), 5, None, [], lambda: next(lost, {}))
    assert code == 137
    assert supervisor.failure is not None and supervisor.failure.host == "node2"
    assert supervisor.failure.process.returncode == -9
    err = capsys.readouterr().err
    assert "launch: node2 sent no heartbeat for 30 s: counted lost; ending sleep to node2\n" in err
    assert "launch: sleep to node2 ended: node2 sent no heartbeat for 30 s; stopping the other ranks\n" in err
