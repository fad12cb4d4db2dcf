"""A process started through PMIx alone: the rank is known, nothing else is.

A PMIx server exports only PMIX_RANK, PMIX_NAMESPACE, PMIX_HOSTNAME and connection details
(PMIx_server_setup_fork() in OpenPMIx); the sizes are PMIx keys, read through the PMIx library,
not variables. The launchers that use PMIx export the sizes themselves (srun's SLURM_*, prterun's
OMPI_COMM_WORLD_*, jsrun's JSM_NAMESPACE_*), and come earlier in ENVIRONMENTS. Detecting PMIx at
all turns a launcher zerokit cannot read into a clear error, instead of N ranks that each believe
they are alone.
"""

from __future__ import annotations

from collections.abc import Mapping

from zerokit.cluster.mpi import MpiEnvironment, launched_by
from zerokit.cluster.tools import MPIRUN
from zerokit.foundations.errors import UserError

VARIABLES: dict[str, tuple[str, ...]] = {"rank": ("PMIX_RANK",)}


class PmixEnvironment(MpiEnvironment):
    name = "pmix"
    title = "PMIx"
    variables = VARIABLES
    job_variables = ()
    multi_node_tools = (MPIRUN,)
    hosts_from = "none from PMIx, and no Slurm job"
    start_fix = "start the ranks with `srun`, `mpirun` or `jsrun`, which also export the sizes"
    address_fix = "MASTER_ADDR=<first host> in every rank's environment"

    @staticmethod
    def detect(environ: Mapping[str, str]) -> bool:
        return launched_by(PmixEnvironment, environ)

    @property
    def rank(self) -> int:
        return self._number("rank")[1]

    @property
    def world_size(self) -> int:
        raise self._unknown("world size")

    @property
    def local_rank(self) -> int:
        raise self._unknown("local rank")

    @property
    def local_world_size(self) -> int:
        raise self._unknown("local world size")

    @property
    def node_rank(self) -> int:
        raise self._unknown("node rank")

    def _unknown(self, what: str) -> UserError:
        return UserError(f"PMIx exports the rank (PMIX_RANK) but not the {what}: {self.start_fix}")
