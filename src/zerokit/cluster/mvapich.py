"""MVAPICH's `mpirun_rsh`. (MVAPICH started by Hydra's `mpiexec` is read as MPICH.)"""

from __future__ import annotations

from collections.abc import Mapping

from zerokit.cluster.mpi import MpiEnvironment, launched_by
from zerokit.cluster.tools import MPIRUN

VARIABLES: dict[str, tuple[str, ...]] = {
    "rank": ("MV2_COMM_WORLD_RANK",),
    "local_rank": ("MV2_COMM_WORLD_LOCAL_RANK",),
    "world_size": ("MV2_COMM_WORLD_SIZE",),
    "local_world_size": ("MV2_COMM_WORLD_LOCAL_SIZE",),
}


class MvapichEnvironment(MpiEnvironment):
    name = "mvapich"
    title = "MVAPICH"
    variables = VARIABLES
    job_variables = ()
    multi_node_tools = (MPIRUN,)
    hosts_from = "none from mpirun_rsh, and no Slurm job"
    start_fix = "start the ranks with `mpirun_rsh` and leave the MV2_COMM_WORLD_* variables to it"
    address_fix = "`mpirun_rsh ... MASTER_ADDR=<first host> <program>`"
    block_fix = "give `mpirun_rsh` a hostfile with one `<host>:<ranks per node>` line per node"

    @staticmethod
    def detect(environ: Mapping[str, str]) -> bool:
        return launched_by(MvapichEnvironment, environ)
