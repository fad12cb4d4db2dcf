"""OpenMPI's `mpirun` (also Spectrum MPI's, and prterun in OpenMPI 5).

OMPI_COMM_WORLD_NODE_RANK is not the node index: it is a local rank counted across all jobs on the
node, so it is not read. The hosts are those of a default hostfile named in the environment
(OpenMPI forwards OMPI_MCA_* to every rank), else those of the Slurm job around mpirun.
"""

from __future__ import annotations

from collections.abc import Mapping

from zerokit.cluster.mpi import MpiEnvironment, launched_by
from zerokit.cluster.tools import MPIRUN

VARIABLES: dict[str, tuple[str, ...]] = {
    "rank": ("OMPI_COMM_WORLD_RANK",),
    "local_rank": ("OMPI_COMM_WORLD_LOCAL_RANK",),
    "world_size": ("OMPI_COMM_WORLD_SIZE",),
    "local_world_size": ("OMPI_COMM_WORLD_LOCAL_SIZE",),
}
HOSTFILES = ("OMPI_MCA_orte_default_hostfile", "PRTE_MCA_prte_default_hostfile")


class OpenMpiEnvironment(MpiEnvironment):
    name = "openmpi"
    title = "OpenMPI"
    variables = VARIABLES
    job_variables = ()
    multi_node_tools = (MPIRUN,)
    hostfile_variables = HOSTFILES
    hosts_from = f"no hostfile in {' or '.join(HOSTFILES)}, and no Slurm job"
    start_fix = "start the ranks with `mpirun` and leave the OMPI_COMM_WORLD_* variables to it"
    address_fix = "`mpirun -x MASTER_ADDR=<first host>`"
    block_fix = "place them with `mpirun --map-by ppr:<ranks per node>:node`"

    @staticmethod
    def detect(environ: Mapping[str, str]) -> bool:
        return launched_by(OpenMpiEnvironment, environ)
