"""A node cut off from the network mid-run, on a 3-node namespace cluster of its own per test: its link goes down
(a pulled cable: the node and its processes live on, nothing reaches them). Under Slurm the job restarts on the
other two nodes; under pdsh with a spare named in advance (--nnodes 2 of 3 hosts) on the other node and the
spare. Each finishes.

Unlike a node that died (test_launch_cluster.py), nothing ends on its own here: the other nodes' ranks hang in
their gloo collectives with the cut node's rank (gloo's own timeout is 30 minutes), ssh's keepalives would take
30 s, and srun learns nothing until slurmctld counts the node down (SlurmdTimeout, 300 s). It is the heartbeats
of the nodes' launches to the head's (launch --node-timeout, 10 s here) that find the node lost; the probe, which
the cut node does not answer, leaves it out.
"""

from __future__ import annotations

import json
import time

from tests.cluster.netcluster import Cluster, cut_off, reconnect
from tests.cluster.test_launch_cluster import (
    finished_job_code,
    head_restart_argv,
    line_seen,
    submit_restart_job,
    through_a_fault,
    wait_for_checkpoint,
)

NODE_TIMEOUT = "10"  # seconds without a node's heartbeat before the head counts it lost (launch --node-timeout)


def test_a_node_cut_off_from_a_slurm_job_is_left_out_and_the_job_restarts_on_the_others(fresh_cluster3: Cluster):
    """scripts/slurm/train-restart.sbatch (sbatch --no-kill) on 3 nodes x 1 rank, ZeRO-2, --max-restarts 1,
    ZEROKIT_NODE_TIMEOUT=10. Once the first checkpoint is whole, node3's link goes down. node1's and node2's ranks
    wait in their collectives with node3's; 10 s after node3's last heartbeat the head ends node3's srun and stops
    the other steps, finds node3 out (its step of `true`
    gets no answer) and starts a step on node1 and on node2 from that checkpoint (2 ranks where 3 wrote it: 4
    per rank x 3 accumulation steps keeps the global batch of 24); the job ends 0, and the run's record names
    the fault. node3's link comes back once the restart is under way, for the job's end: slurmctld needs node3
    back to complete the job (a job that ends with node3 still cut off stays COMPLETING on it, until node3
    answers again or is counted DOWN after SlurmdTimeout, 300 s)."""
    cluster = fresh_cluster3
    tmp = cluster.shared_dir / "slurm-node-cut-off"
    tmp.mkdir()
    job_id, output, lines, stop_reading = submit_restart_job(cluster, tmp, "zero2", ZEROKIT_NODE_TIMEOUT=NODE_TIMEOUT)
    cut_at = restarted = None
    try:
        wait_for_checkpoint(output, lines)
        cut_at = time.monotonic()
        cut_off(cluster, "node3")
        restarted = line_seen(lines, "a machine fault; node3 left out", cut_at + 120)
    except BaseException:
        cluster.run("node1", ["scancel", job_id])
        raise
    finally:
        if cut_at is not None:  # node3's cable back in, for the job's end
            reconnect(cluster, "node3")
    reconnected = time.monotonic()
    code = finished_job_code(cluster, job_id, timeout=300)
    ended = time.monotonic()
    stop_reading()
    log = "".join(line for _, line in lines)
    assert code == 0 and restarted is not None, log[-6000:]
    assert ": a machine fault; node3 left out; restart 1 of 1 on 2 node(s) (node1,node2), from " in log, log[-6000:]
    assert "node3 does not answer (" in log and "launch: node3 sent no heartbeat for 1" in log, log[-6000:]
    assert (output / "model.safetensors").is_file()
    (event,) = json.loads((output / "zerokit-run.json").read_text())["restarts"]
    assert (event["left_out"], event["hosts"], event["restart"]) == (["node3"], ["node1", "node2"], 1)
    step = next(t for t, line in lines if t > restarted and "'loss'" in line)
    print(f"node cut off: restart {restarted - cut_at:.1f} s, first step {step - cut_at:.1f} s after the cut; "
          f"the job ended {ended - reconnected:.1f} s after node3 was reconnected")  # fmt: skip
    print("".join(line for _, line in lines if line.startswith("launch: ") and "rank " not in line[:14]))


def test_a_node_cut_off_from_a_pdsh_job_is_replaced_by_the_spare(fresh_cluster3: Cluster):
    """pdsh from node1, `--nnodes 2` of 3 hosts (node3 the spare), 1 rank each, ZeRO-3, --max-restarts 1: once the
    first checkpoint is whole, node2's link goes down (a cable pulled: its processes live on). node1's rank waits
    for node2's in a collective; 10 s after node2's last heartbeat the head ends node2's pdsh and stops node1's,
    finds node2 silent and node3 answering, and starts the job again on node1 and node3 from that checkpoint: 2 ranks as
    before, so it resumes without conversion and with the accumulation it had. The run finishes; its record names
    the spare that joined."""
    cluster = fresh_cluster3
    tmp = cluster.shared_dir / "pdsh-node-cut"
    tmp.mkdir()
    argv, output = head_restart_argv(tmp, "zero3", "--nnodes", "2", "--node-timeout", NODE_TIMEOUT)
    code, lines, cut_at = through_a_fault(
        cluster, argv, tmp, output, lambda: cut_off(cluster, "node2"), lambda: reconnect(cluster, "node2")
    )
    log = "".join(line for _, line in lines)
    assert code == 0, log[-6000:]
    restart = ": a machine fault; node2 left out, spare node3 in its place; restart 1 of 1 on 2 node(s) (node1,node3)"
    assert restart in log, log[-6000:]
    assert "node2 does not answer (" in log and "converting" not in log
    assert "launch: node2 sent no heartbeat for 1" in log
    assert (output / "model.safetensors").is_file()
    (event,) = json.loads((output / "zerokit-run.json").read_text())["restarts"]
    assert (event["left_out"], event["hosts"], event["spares_joined"]) == (["node2"], ["node1", "node3"], ["node3"])
    assert 0 <= event["steps_lost"] <= 2, event  # at most the save interval
    restarted = next(t for t, line in lines if restart in line)
    step = next(t for t, line in lines if t > restarted and "'loss'" in line)
    print(f"node cut off: restart {restarted - cut_at:.1f} s, first step {step - cut_at:.1f} s after the cut")
