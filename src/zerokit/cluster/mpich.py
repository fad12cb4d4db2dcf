"""MPICH's and Intel MPI's `mpiexec` (Hydra), and Cray PALS.

Hydra exports the local rank and size as MPI_LOCALRANKID / MPI_LOCALNRANKS, PALS as PMI_LOCAL_RANK /
PMI_LOCAL_SIZE; both are read. `srun --mpi=pmi2` sets PMI_RANK and PMI_SIZE alone, and srun's other
PMI plugins agree with SLURM_*: such ranks are Slurm's (see started_by_srun). The hosts are those of
a host file named in the environment, else those of the Slurm job around mpiexec.
"""

from __future__ import annotations

from collections.abc import Mapping

from zerokit.cluster.mpi import MpiEnvironment, launched_by
from zerokit.cluster.tools import MPIRUN

VARIABLES: dict[str, tuple[str, ...]] = {
    "rank": ("PMI_RANK",),
    "local_rank": ("MPI_LOCALRANKID", "PMI_LOCAL_RANK"),
    "world_size": ("PMI_SIZE",),
    "local_world_size": ("MPI_LOCALNRANKS", "PMI_LOCAL_SIZE"),
}
HOSTFILES = ("HYDRA_HOST_FILE", "I_MPI_HYDRA_HOST_FILE")


class MpichEnvironment(MpiEnvironment):
    name = "mpich"
    title = "MPICH"
    variables = VARIABLES
    job_variables = ()
    multi_node_tools = (MPIRUN,)
    hostfile_variables = HOSTFILES
    hosts_from = f"no host file in {' or '.join(HOSTFILES)}, and no Slurm job"
    start_fix = "start the ranks with `mpiexec` and leave the PMI_* variables to it"
    address_fix = "`mpiexec -genv MASTER_ADDR <first host>`"
    block_fix = "place them with `mpiexec -ppn <ranks per node>`"

    @staticmethod
    def detect(environ: Mapping[str, str]) -> bool:
        return launched_by(MpichEnvironment, environ)
