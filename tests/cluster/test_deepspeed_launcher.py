"""DeepSpeed's own launcher, started inside train.sif on node1, reaches node2 inside the same SIF (the
image's `ssh`, zerokit.launch.remote_shell), over pdsh and over `--launcher openmpi`; DeepSpeed unpatched.
node2's host has apptainer and no /opt/venv: only the image can run the ranks there. About 1 minute each.

On CPU ranks the script goes through `--module zerokit.launch.rank.user_script` (HF's CPU path starts DeepSpeed's
communication after ZeRO-3 has read the world size; on GPU nodes `deepspeed ... script.py` needs nothing).
"""

from __future__ import annotations

from pathlib import Path

from tests.apptainer.runtime import Apptainer
from tests.cluster.jobs import deepspeed_openmpi, deepspeed_pdsh
from tests.cluster.netcluster import Cluster
from tests.cluster.test_user_scripts_cluster import assert_two_node_job, run_in_sif, tutorial_job


def test_deepspeed_hostfile_over_pdsh_runs_node2_in_the_sif(cluster: Cluster, apptainer: Apptainer, sif: Path):
    tmp, script = tutorial_job(cluster, "ds-pdsh")
    log = run_in_sif(cluster, apptainer, sif, tmp, deepspeed_pdsh(cluster, tmp, script))
    assert f"apptainer exec --nv {sif}" not in log  # the rewrite is ssh's, not DeepSpeed's command
    assert_two_node_job(log, tmp)


def test_deepspeed_hostfile_over_openmpi_runs_node2_in_the_sif(cluster: Cluster, apptainer: Apptainer, sif: Path):
    tmp, script = tutorial_job(cluster, "ds-openmpi")
    assert_two_node_job(run_in_sif(cluster, apptainer, sif, tmp, deepspeed_openmpi(cluster, tmp, script)), tmp)
