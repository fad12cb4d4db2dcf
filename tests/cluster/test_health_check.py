"""`launch --check` on a real 3-node cluster (network namespaces, Slurm, OpenMPI): the check passes on a
healthy allocation, and names the node with a slow link, the node that cannot reach the main port, and
the node that runs another stack, each within its bound and with nothing left running.

Each node is a namespace with its own `eth0`; `tc` and `iptables` act on that node's alone. The slow link is
a rate limit (tc's tbf): this kernel, like many CI kernels, has no netem.
"""

from __future__ import annotations

import json
import re
import shlex
import subprocess
import time
from pathlib import Path

import pytest

from tests.cluster.netcluster import Cluster
from tests.cluster.test_launch_cluster import REPO, cpu_job_script, node_env, sbatch, train_args

PORT = 29517  # fixed, so that the firewall test can drop it


@pytest.fixture
def tmp(cluster3: Cluster) -> Path:
    folder = cluster3.shared_dir / f"check-{time.monotonic_ns()}"
    folder.mkdir()
    return folder


def srun_check(cluster: Cluster, tmp: Path, nodes: int, *flags: str, rank_prefix: str = "") -> tuple[int, str, float]:
    """`srun launch --check-only FLAGS` on NODES nodes, one rank each: (exit code, output, seconds)."""
    launch = f"launch --master-port {PORT} --check-only {' '.join(flags)}"
    argv = ["srun", f"--nodes={nodes}", "--ntasks-per-node=1", "--cpus-per-task=1", "--kill-on-bad-exit=1",
            "bash", "-c", f"{rank_prefix} exec {launch}"]  # fmt: skip
    started = time.monotonic()
    result = cluster.run("node1", argv, env=node_env(tmp), cwd=tmp, timeout=180)
    return result.returncode, result.stdout + result.stderr, time.monotonic() - started


def report_of(output: str) -> dict:
    """The JSON report rank 0 printed (the only JSON object in the output)."""
    start = output.index("{\n")
    return json.JSONDecoder().raw_decode(output[start:])[0]


def assert_healthy(report: dict, hosts: list[str]) -> None:
    assert report["verdict"] == "pass", report["findings"]
    assert [n["host"] for n in report["nodes"]] == hosts
    pairs = {frozenset((link["a"], link["b"])) for link in report["links"]}
    assert pairs == {frozenset((a, b)) for i, a in enumerate(hosts) for b in hosts[i + 1 :]}
    assert all(
        link["latency_us"] > 0 and link["a_to_b_gbps"] > 0 and link["b_to_a_gbps"] > 0 for link in report["links"]
    )
    ops = {row["op"] for row in report["collectives"]}
    assert ops == {"all_reduce", "all_gather"} and all(row["busbw_gbps"] > 0 for row in report["collectives"])
    assert all(n["facts"]["interface"] == "eth0" for n in report["nodes"])


class Firewalled:
    """iptables on NODES drops their packets to rank 0's port (each node's own netfilter)."""

    def __init__(self, cluster: Cluster, *nodes: str) -> None:
        self.namespaces = [cluster.node(n).netns for n in nodes]
        self.rule = ["OUTPUT", "-p", "tcp", "--dport", str(PORT), "-j", "DROP"]

    def __enter__(self) -> None:
        for netns in self.namespaces:
            subprocess.run(["ip", "netns", "exec", netns, "iptables", "-A", *self.rule], check=True)

    def __exit__(self, *_: object) -> None:
        for netns in self.namespaces:
            subprocess.run(["ip", "netns", "exec", netns, "iptables", "-D", *self.rule], check=True)


def leftovers(cluster: Cluster) -> list[str]:
    """Command lines of check or launch processes still running on any node."""
    found = []
    for node in cluster.nodes:
        pids = subprocess.run(["ip", "netns", "pids", node.netns], capture_output=True, text=True).stdout.split()
        for pid in pids:
            try:
                cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
            except OSError:
                continue
            if "zerokit.healthcheck" in cmdline or "zerokit launch" in cmdline:
                found.append(f"{node.name}: {cmdline}")
    return found


def test_check_over_srun_passes_and_reports_every_node_and_link(cluster3: Cluster, tmp: Path):
    """Three nodes, three links (two nodes pass in test_check_then_runs_the_command_on_every_rank)."""
    nodes = 3
    code, output, seconds = srun_check(cluster3, tmp, nodes, "--json")
    assert code == 0, output[-4000:]
    assert_healthy(report_of(output), [f"node{i}" for i in range(1, nodes + 1)])
    print(f"launch --check-only over srun, {nodes} nodes: {seconds:.1f} s")


def test_check_over_host_mpirun_passes(cluster3: Cluster, tmp: Path):
    """Three nodes (the mpirun job script of test_mpirun_job_script_with_check_runs_it_then_trains checks two)."""
    hosts = ["node1", "node2", "node3"]
    (tmp / "hosts").write_text("\n".join(hosts) + "\n")
    env = node_env(tmp, OMPI_MCA_plm_rsh_agent=str(cluster3.rsh_agent), OMPI_MCA_pml="ob1", OMPI_MCA_btl="tcp,self")
    printed = cluster3.run("node1", ["launch", "--launcher", "mpirun", "--hostfile", str(tmp / "hosts"),
                                     "--nproc-per-node", "1", "--check-only", "--json", "--print-command"],
                           env=env, cwd=tmp)  # fmt: skip
    assert printed.returncode == 0, printed.stderr
    assert "-m zerokit.healthcheck" in printed.stdout
    result = cluster3.run("node1", shlex.split(printed.stdout), env=env, cwd=tmp, timeout=180)
    output = result.stdout + result.stderr
    assert result.returncode == 0, output[-4000:]
    assert_healthy(report_of(output), hosts)


def test_check_then_runs_the_command_on_every_rank(cluster3: Cluster, tmp: Path):
    """Without --check-only, the command runs after a passing check, as every rank."""
    argv = ["srun", "--nodes=2", "--ntasks-per-node=1", "--cpus-per-task=1", "launch", "--master-port", str(PORT),
            "--check", "--", "bash", "-c", "echo trained as rank $RANK on $(hostname)"]  # fmt: skip
    result = cluster3.run("node1", argv, env=node_env(tmp), cwd=tmp, timeout=180)
    output = result.stdout + result.stderr
    assert result.returncode == 0, output[-4000:]
    pair = re.search(r"^node1 <-> node2: [\d.]+ GB/s via gloo over TCP \(eth0\); latency .*$", output, re.MULTILINE)
    assert "verdict: PASS" in output and pair, output[-4000:]  # the pair's line names what carried its figure
    print(f"the pair's line: {pair[0]}")
    assert output.index("verdict: PASS") < output.index("trained as rank")
    assert "trained as rank 0 on node1" in output and "trained as rank 1 on node2" in output  # lines may interleave


def test_a_slow_link_names_its_node(cluster3: Cluster, tmp: Path):
    netns = cluster3.node("node2").netns
    tc = ["ip", "netns", "exec", netns, "tc", "qdisc"]
    subprocess.run([*tc, "add", "dev", "eth0", "root", "tbf", "rate", "100mbit", "burst", "64kb", "latency", "100ms"],
                   check=True)  # fmt: skip
    try:
        code, output, seconds = srun_check(cluster3, tmp, 3, "--json")
    finally:
        subprocess.run([*tc, "del", "dev", "eth0", "root"], check=True)
    assert code != 0, output[-4000:]  # 1, or 143: srun --kill-on-bad-exit ends the others
    report = report_of(output)
    print(f"slow link check, 3 nodes: {seconds:.1f} s; findings: {report['findings']}")
    assert report["verdict"] == "fail"
    assert [(f["host"], f["problem"].split(" (")[0]) for f in report["findings"]] == [("node2", "slow link")]
    assert report["slowest_links"][:2] == ["node1-node2", "node2-node3"] or set(report["slowest_links"][:2]) == {
        "node1-node2", "node2-node3"}  # fmt: skip


def test_a_node_that_cannot_reach_the_main_port_is_named_within_the_bound(cluster3: Cluster, tmp: Path):
    with Firewalled(cluster3, "node3"):
        code, output, seconds = srun_check(cluster3, tmp, 3, "--check-timeout", "10")
    print(f"firewalled node3, --check-timeout 10: srun ended after {seconds:.1f} s")
    assert code != 0, output[-4000:]
    assert seconds < 45, f"took {seconds:.0f} s with --check-timeout 10"
    assert "never arrived within 10 s: node3 (rank 2)" in output, output[-4000:]
    assert f"node3: rank 2 cannot reach the main address node1:{PORT}" in output, output[-4000:]
    assert "--ifname" in output
    time.sleep(1)
    assert leftovers(cluster3) == []


def test_a_node_on_another_stack_is_named(cluster3: Cluster, tmp: Path):
    """node2's ranks run with another stack (as from another image): its stack and lock differ from the others'."""
    other = 'if [ "$(hostname)" = node2 ]; then export ZEROKIT_STACK=dev; fi;'
    code, output, _ = srun_check(cluster3, tmp, 3, "--no-preflight", "--json", rank_prefix=other)
    assert code != 0, output[-4000:]  # 1, or 143: srun --kill-on-bad-exit ends the others
    findings = report_of(output)["findings"]
    assert [f["host"] for f in findings] == ["node2"]
    assert "stack dev (the others: cpu)" in findings[0]["problem"] and "lock_sha256" in findings[0]["problem"]
    assert leftovers(cluster3) == []


def test_job_script_with_check_ends_the_job_before_training(cluster3: Cluster, tmp: Path):
    """scripts/slurm/train.sbatch with CHECK=1: the check is its own step; when it fails, nothing trains."""
    output = tmp / "run"
    env = node_env(tmp, CONTAINER="none", CHECK="1", MASTER_PORT=str(PORT), ZEROKIT_CHECK_TIMEOUT="10",
                   TRAIN_ARGS=train_args(output))  # fmt: skip
    with Firewalled(cluster3, "node2", "node3"):
        code, log = sbatch(cluster3, cpu_job_script("scripts/slurm/train.sbatch", tmp), tmp, env, "--ntasks-per-node=1")
    assert code != 0, log[-4000:]
    assert "never arrived within 10 s: node2 (rank 1)" in log, log[-4000:]
    assert "the health check failed (report above): not training" in log
    assert not output.exists()
    assert leftovers(cluster3) == []


def test_mpirun_job_script_with_check_runs_it_then_trains(cluster3: Cluster, tmp: Path):
    """scripts/mpirun/train.sh with CHECK=1 on a healthy pair of nodes: the report, then a short training."""
    (tmp / "hosts").write_text("node1\nnode2\n")
    output = tmp / "run"
    mpi = {"OMPI_MCA_plm_rsh_agent": str(cluster3.rsh_agent), "OMPI_MCA_pml": "ob1", "OMPI_MCA_btl": "tcp,self"}
    env = node_env(tmp, CONTAINER="none", CHECK="1", HOSTFILE=str(tmp / "hosts"), RANKS_PER_NODE="1",
                   TRAIN_ARGS=train_args(output).replace("--max_steps 30", "--max_steps 4"), **mpi)  # fmt: skip
    result = cluster3.run("node1", [str(REPO / "scripts/mpirun/train.sh")], env=env, cwd=tmp, timeout=600)
    log = result.stdout + result.stderr
    assert result.returncode == 0, log[-4000:]
    assert "verdict: PASS" in log
    assert (
        log.index("verdict: PASS")
        < log.index("rank 0 of 2 on node1 (local rank 0 of 1, node 0 of 2, openmpi), main node1:") + 1
    )
    assert (output / "model.safetensors").is_file()
