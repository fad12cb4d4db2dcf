"""Which environment this process runs in: the detection order, in one place."""

from __future__ import annotations

from collections.abc import Mapping

from zerokit.cluster.base import ClusterEnvironment
from zerokit.cluster.flux import FluxEnvironment
from zerokit.cluster.kubeflow import KubeflowEnvironment
from zerokit.cluster.lsf import LsfEnvironment
from zerokit.cluster.mpich import MpichEnvironment
from zerokit.cluster.mvapich import MvapichEnvironment
from zerokit.cluster.openmpi import OpenMpiEnvironment
from zerokit.cluster.pbs import PbsEnvironment
from zerokit.cluster.pmix import PmixEnvironment
from zerokit.cluster.sge import SgeEnvironment
from zerokit.cluster.slurm import SlurmEnvironment
from zerokit.cluster.torchrun import TorchrunEnvironment
from zerokit.foundations.errors import UserError

# The first match wins, so the launcher nearest to this process comes first: a process inherits
# the variables of every launcher above it, and only the nearest one describes it.
ENVIRONMENTS: tuple[type[ClusterEnvironment], ...] = (
    # A Kubeflow PyTorchJob pod has RANK and WORLD_SIZE, meant for the torchrun it is to start: it
    # comes before torchrun, and declines a process with LOCAL_RANK, which every torchrun worker has.
    KubeflowEnvironment,
    # Then torchrun: a torchrun (or `zerokit launch`, or DeepSpeed's launcher) run inside a Slurm
    # or MPI job sets RANK, LOCAL_RANK, ... for each worker it starts; the SLURM_* / OMPI_* that the
    # worker inherited describe the torchrun process, one per node, not the worker.
    TorchrunEnvironment,
    # Batch jobs whose ranks an MPI launcher started: they wrap that launcher and add the hosts.
    LsfEnvironment,
    PbsEnvironment,
    SgeEnvironment,
    # Flux before the MPI launchers: its pmi plugin sets PMI_RANK and PMI_SIZE in every task.
    FluxEnvironment,
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

NAMES: tuple[str, ...] = tuple(env.name for env in ENVIRONMENTS)
# The least value of a logical variable that says "one of several ranks" (see several_ranks_from).
SEVERAL_RANKS = {"rank": 1, "world_size": 2}
# What every rank must be told; a launcher's other variables (node index, job id) are optional.
RANK_VALUES = ("rank", "local_rank", "world_size", "local_world_size")


def detect_environment(environ: Mapping[str, str]) -> ClusterEnvironment | None:
    """The environment `environ` belongs to, or None outside any distributed launcher."""
    return next((env(environ) for env in ENVIRONMENTS if env.detect(environ)), None)


def rank_environment(environ: Mapping[str, str]) -> ClusterEnvironment | None:
    """The environment of a process about to run as a rank (or to start ranks); None: a lone rank.

    Stricter than detect_environment: a process that one launcher's variables mark as one of
    several ranks (PMI_RANK=1, OMPI_COMM_WORLD_SIZE=2) without the rest of them is refused. Run
    as a lone rank 0 of 1, it would train alone and write over the other ranks' output.
    """
    found = detect_environment(environ)
    marker = None if found else several_ranks_marker(environ)
    if marker is not None:
        env, variable = marker
        tables = (env.variables.get(logical, ()) for logical in RANK_VALUES)
        unset = [" or ".join(names) for names in tables if names and not _any_set(environ, names)]
        missing = f" (unset: {', '.join(unset)})" if unset else ""
        raise UserError(
            f"{variable}={environ[variable].strip()} says this process is one of several {env.title} ranks, but "
            f"the rest of {env.title}'s variables do not{missing}: {env.start_fix}, or unset {variable} to run "
            "this process alone"
        )
    return found


def several_ranks_marker(environ: Mapping[str, str]) -> tuple[type[ClusterEnvironment], str] | None:
    """(environment, variable): the first variable that says this is one of several ranks, if any."""
    for env in ENVIRONMENTS:
        for logical in env.several_ranks_from:
            for variable in env.variables.get(logical, ()):
                value = environ.get(variable, "").strip()
                if value.isdigit() and int(value) >= SEVERAL_RANKS[logical]:
                    return env, variable
    return None


def _any_set(environ: Mapping[str, str], names: tuple[str, ...]) -> bool:
    return any(environ.get(name, "").strip() for name in names)
