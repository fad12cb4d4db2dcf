"""The short two-node job (tests/users/tutorial_trainer.py, 12 steps) as each multi-node launcher starts it
from node1: inside train.sif (MULTI_NODE_JOBS), or from node1's host, a scheduler starting the SIF on every
node (HOST_JOBS). Tables read by the cluster tests and by tests/cluster/soak."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from tests.cluster.netcluster import Cluster

# argv after `apptainer exec SIF`, run on node1 in the job's folder; `script` is tutorial_job's.
Job = Callable[[Cluster, Path, list[str]], list[str]]
# The whole argv, run on node1's host in the job's folder; the last argument is the SIF.
HostJob = Callable[[Cluster, Path, list[str], Path], list[str]]


def python_script(script: list[str]) -> list[str]:
    """tutorial_job's script as `script.py ARGS`, without DeepSpeed's `--module zerokit.launch.rank.user_script`."""
    return script[script.index("zerokit.launch.rank.user_script") + 1 :]


def deepspeed_pdsh(_cluster: Cluster, _tmp: Path, script: list[str]) -> list[str]:
    return ["deepspeed", "--hostfile", "hostfile", "--num_nodes", "2", "--num_gpus", "1", *script]


def deepspeed_openmpi(cluster: Cluster, _tmp: Path, script: list[str]) -> list[str]:
    mca = f"--mca oob_tcp_if_include {cluster.subnet} --mca btl_tcp_if_include {cluster.subnet} --allow-run-as-root"
    return ["deepspeed", "--hostfile", "hostfile", "--launcher", "openmpi", "--launcher_args", mca, *script]


def launch_with(launcher: str) -> Job:
    """`launch --launcher LAUNCHER` with the same script, as `-- python script.py ARGS`."""

    def argv(_cluster: Cluster, tmp: Path, script: list[str]) -> list[str]:
        return ["launch", "--launcher", launcher, "--hostfile", str(tmp / "hostfile"), "--nproc-per-node", "1",
                "--", "python", *python_script(script)]  # fmt: skip

    return argv


MULTI_NODE_JOBS: dict[str, Job] = {
    "deepspeed-pdsh": deepspeed_pdsh,
    "deepspeed-openmpi": deepspeed_openmpi,
    "launch-pdsh": launch_with("pdsh"),
    "launch-mpirun": launch_with("mpirun"),
}


def launch_under_srun(_cluster: Cluster, _tmp: Path, script: list[str], sif: Path) -> list[str]:
    """Slurm starts one task per node, each `apptainer exec SIF launch`, which becomes the rank (exec)."""
    return ["srun", "--nodes=2", "--ntasks-per-node=1", "--cpus-per-task=1", "apptainer", "exec", str(sif),
            "launch", "--", "python", *python_script(script)]  # fmt: skip


HOST_JOBS: dict[str, HostJob] = {
    "launch-srun": launch_under_srun,
}
