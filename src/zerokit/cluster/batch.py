"""Batch schedulers whose jobs start their ranks with an MPI launcher: PBS, SGE and LSF.

The scheduler names the job and writes its hosts to a file; the launcher run inside the job
(mpiexec, mpirun) gives each rank its numbers. An environment here composes the two: the ranks
from the launcher, the hosts and the job id from the scheduler. A job script itself, or a task of
pbsdsh or blaunch, has the scheduler's variables but no rank: it is not detected, as a Slurm batch
script is not.
"""

from __future__ import annotations

from collections.abc import Mapping
from functools import cached_property

from zerokit.cluster.base import ClusterEnvironment
from zerokit.cluster.mpi import MpiEnvironment
from zerokit.cluster.mpich import MpichEnvironment
from zerokit.cluster.mvapich import MvapichEnvironment
from zerokit.cluster.openmpi import OpenMpiEnvironment
from zerokit.cluster.pmix import PmixEnvironment
from zerokit.foundations.errors import UserError

# The MPI launchers a batch job may run, in the order of detect.ENVIRONMENTS (a test checks it).
MPI_LAUNCHERS: tuple[type[MpiEnvironment], ...] = (
    OpenMpiEnvironment,
    MvapichEnvironment,
    MpichEnvironment,
    PmixEnvironment,
)


def find_mpi_launcher(environ: Mapping[str, str]) -> MpiEnvironment | None:
    return next((launcher(environ) for launcher in MPI_LAUNCHERS if launcher.detect(environ)), None)


class BatchJobEnvironment(ClusterEnvironment):
    start_fix = "start the ranks with `mpiexec` or `mpirun` inside the job"

    @cached_property
    def launcher(self) -> ClusterEnvironment:
        """The environment of the launcher that started this rank."""
        found = self._find_launcher()
        if found is None:
            raise UserError(f"no MPI launcher started this process in the {self.title} job: {self.start_fix}")
        return found

    def _find_launcher(self) -> ClusterEnvironment | None:
        return find_mpi_launcher(self.environ)

    @property
    def rank(self) -> int:
        return self.launcher.rank

    @property
    def local_rank(self) -> int:
        return self.launcher.local_rank

    @property
    def world_size(self) -> int:
        return self.launcher.world_size

    @property
    def local_world_size(self) -> int:
        return self.launcher.local_world_size

    @property
    def node_rank(self) -> int:
        return self.launcher.node_rank

    @property
    def address_fix(self) -> str:  # the launcher's way to pass MASTER_ADDR
        return self.launcher.address_fix
