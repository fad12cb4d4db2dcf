"""The namespace cluster is a real cluster: separate hosts on a network, Slurm, OpenMPI, ssh and pdsh across them."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from tests.cluster.netcluster import Cluster, missing_requirements, start_cluster


def ok(result: subprocess.CompletedProcess[str]) -> str:
    """stdout of a command that must have succeeded; the assertion shows what it said if not."""
    assert result.returncode == 0, f"{result.args} exited {result.returncode}:\n{result.stdout}\n{result.stderr}"
    return result.stdout


def test_each_node_has_its_own_hostname_address_and_interfaces(cluster: Cluster) -> None:
    for node in cluster.nodes:
        assert ok(cluster.run(node.name, ["hostname"])).strip() == node.name
        addresses = ok(cluster.run(node.name, ["ip", "-4", "-o", "addr", "show", "dev", cluster.iface]))
        assert f"inet {node.ip}/24 " in addresses
        assert ok(cluster.run(node.name, ["ls", "/sys/class/net"])).split() == sorted(["lo", cluster.iface])


def test_nodes_resolve_and_reach_each_other(cluster: Cluster) -> None:
    for node in cluster.nodes:
        for other in cluster.nodes:
            assert ok(cluster.run(node.name, ["getent", "hosts", other.name])).split() == [other.ip, other.name]
            # A TCP connection to the other node's sshd, which listens on that node's address only.
            banner = cluster.run(node.name, ["bash", "-c", f"exec 3<>/dev/tcp/{other.name}/22; head -c 7 <&3"])
            assert ok(banner) == "SSH-2.0"


def test_each_node_has_a_private_tmp(cluster: Cluster) -> None:
    node1, node2 = cluster.names[:2]
    ok(cluster.run(node1, ["sh", "-c", "echo mine > /tmp/zk-private"]))
    assert ok(cluster.run(node1, ["cat", "/tmp/zk-private"])) == "mine\n"
    assert cluster.run(node2, ["test", "-e", "/tmp/zk-private"]).returncode == 1


def test_commands_run_in_the_given_directory_with_the_callers_environment(
    cluster: Cluster, cluster_tmp_path: Path
) -> None:
    out = cluster.run("node2", ["sh", "-c", 'pwd; echo "$ZK_MARK"'], cwd=cluster_tmp_path, env={"ZK_MARK": "m1"})
    assert ok(out).split() == [str(cluster_tmp_path), "m1"]


def test_srun_runs_one_task_per_node(cluster: Cluster) -> None:
    out = ok(cluster.run("node1", ["srun", "--nodes=2", "--ntasks=2", "hostname"]))
    assert sorted(out.split()) == cluster.names


def test_sbatch_wait_runs_a_two_node_job(cluster: Cluster, cluster_tmp_path: Path) -> None:
    script = cluster_tmp_path / "job.sh"
    script.write_text('#!/bin/bash\necho "nodes=$SLURM_JOB_NODELIST"\nsrun hostname\n')
    output = cluster_tmp_path / "job.out"
    ok(cluster.run("node1", ["sbatch", "--wait", "--nodes=2", "--ntasks-per-node=1", f"--output={output}", script]))
    lines = output.read_text().split()
    assert lines[0] == "nodes=node[1-2]"
    assert sorted(lines[1:]) == cluster.names


def test_mpirun_runs_one_process_per_node(cluster: Cluster) -> None:
    report = 'echo "$(hostname) $OMPI_COMM_WORLD_RANK $OMPI_COMM_WORLD_SIZE"'
    out = ok(cluster.run("node1", [*cluster.mpirun_args(), "-np", "2", "sh", "-c", report]))
    assert sorted(out.splitlines()) == ["node1 0 2", "node2 1 2"]


def test_plain_ssh_reaches_the_other_node(cluster: Cluster) -> None:
    # As DeepSpeed's pdsh runner does: `ssh HOST hostname -I`, no options.
    assert ok(cluster.run("node1", ["ssh", "node2", "hostname"])).strip() == "node2"
    assert ok(cluster.run("node1", ["ssh", "node2", "hostname", "-I"])).split() == [cluster.ips["node2"]]
    assert ok(cluster.run("node2", ["ssh", "node1", "hostname"])).strip() == "node1"


def test_pdsh_runs_on_every_node(cluster: Cluster) -> None:
    out = ok(cluster.run("node1", ["pdsh", "-w", ",".join(cluster.names), "hostname"]))
    assert sorted(out.splitlines()) == [f"{name}: {name}" for name in cluster.names]


def test_teardown_leaves_nothing_and_a_new_cluster_comes_up() -> None:
    if missing_requirements():
        pytest.skip("; ".join(missing_requirements()))
    for _ in range(2):
        extra = start_cluster(2)
        namespaces = [n.netns for n in extra.nodes] + [extra.bridge_netns]
        pids = [d.proc.pid for d in extra.daemons] + [h.pid for h in extra.holders.values()]
        ok(extra.run("node1", ["srun", "--nodes=2", "hostname"]))
        extra.teardown()
        listed = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True, check=True).stdout
        assert not [ns for ns in namespaces if ns in listed]
        assert not [pid for pid in pids if Path(f"/proc/{pid}").exists()]
        assert not extra.run_dir.exists()


def test_rsh_agent_enters_the_named_node_like_ssh(cluster: Cluster) -> None:
    agent = str(cluster.rsh_agent)
    out = cluster.run(
        "node1",
        [agent, "-x", "-l", "root", cluster.ips["node2"], "echo", "$(hostname)", "$ZK_MARK"],
        env={"ZK_MARK": "m2"},
    )
    assert ok(out) == "node2 m2\n"
    assert cluster.run("node1", [agent, "node9", "true"]).returncode == 255
