"""The short two-node job (tests/users/tutorial_trainer.py, 12 steps) as each multi-node launcher starts it
from node1 inside train.sif: one table, read by the cluster tests and by tests/cluster/soak."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from tests.cluster.netcluster import Cluster

# argv after `apptainer exec SIF`, run on node1 in the job's folder; `script` is tutorial_job's.
Job = Callable[[Cluster, Path, list[str]], list[str]]


def deepspeed_pdsh(_cluster: Cluster, _tmp: Path, script: list[str]) -> list[str]:
    return ["deepspeed", "--hostfile", "hostfile", "--num_nodes", "2", "--num_gpus", "1", *script]


def deepspeed_openmpi(cluster: Cluster, _tmp: Path, script: list[str]) -> list[str]:
    mca = f"--mca oob_tcp_if_include {cluster.subnet} --mca btl_tcp_if_include {cluster.subnet} --allow-run-as-root"
    return ["deepspeed", "--hostfile", "hostfile", "--launcher", "openmpi", "--launcher_args", mca, *script]


def launch_with(launcher: str) -> Job:
    """`launch --launcher LAUNCHER` with the same script, as `-- python script.py ARGS`."""

    def argv(_cluster: Cluster, tmp: Path, script: list[str]) -> list[str]:
        python_script = script[script.index("zerokit.launch.user_script") + 1 :]
        return ["launch", "--launcher", launcher, "--hostfile", str(tmp / "hostfile"), "--nproc-per-node", "1",
                "--", "python", *python_script]  # fmt: skip

    return argv


MULTI_NODE_JOBS: dict[str, Job] = {
    "deepspeed-pdsh": deepspeed_pdsh,
    "deepspeed-openmpi": deepspeed_openmpi,
    "launch-pdsh": launch_with("pdsh"),
    "launch-mpirun": launch_with("mpirun"),
}
