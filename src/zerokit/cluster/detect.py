"""Which environment this process runs in: the detection order, in one place."""

from __future__ import annotations

from collections.abc import Mapping

from zerokit.cluster.base import ClusterEnvironment
from zerokit.cluster.lsf import LsfEnvironment
from zerokit.cluster.mpich import MpichEnvironment
from zerokit.cluster.mvapich import MvapichEnvironment
from zerokit.cluster.openmpi import OpenMpiEnvironment
from zerokit.cluster.pbs import PbsEnvironment
from zerokit.cluster.pmix import PmixEnvironment
from zerokit.cluster.sge import SgeEnvironment
from zerokit.cluster.slurm import SlurmEnvironment
from zerokit.cluster.torchrun import TorchrunEnvironment

# The first match wins, so the launcher nearest to this process comes first: a process inherits
# the variables of every launcher above it, and only the nearest one describes it.
ENVIRONMENTS: tuple[type[ClusterEnvironment], ...] = (
    # torchrun first: a torchrun (or `zerokit launch`, or DeepSpeed's launcher) run inside a Slurm
    # or MPI job sets RANK, LOCAL_RANK, ... for each worker it starts; the SLURM_* / OMPI_* that the
    # worker inherited describe the torchrun process, one per node, not the worker.
    TorchrunEnvironment,
    # Batch jobs whose ranks an MPI launcher started: they wrap that launcher and add the hosts.
    LsfEnvironment,
    PbsEnvironment,
    SgeEnvironment,
    # MPI launchers before Slurm: mpirun and mpiexec start their daemons with srun inside a Slurm
    # job, so their ranks inherit the daemons' SLURM_PROCID and SLURM_STEP_ID. Where srun itself set
    # the MPI variables (--mpi=pmi2, cray_shasta), they agree with SLURM_* and the MPI launchers
    # decline (slurm.started_by_srun), so those ranks are Slurm's.
    OpenMpiEnvironment,
    MvapichEnvironment,
    MpichEnvironment,
    SlurmEnvironment,
    # PMIx last: it exports only the rank, and srun, prterun and jsrun export PMIX_RANK too.
    PmixEnvironment,
)


def detect_environment(environ: Mapping[str, str]) -> ClusterEnvironment | None:
    """The environment `environ` belongs to, or None outside any distributed launcher."""
    return next((env(environ) for env in ENVIRONMENTS if env.detect(environ)), None)
