"""The base of the MPI launchers: OpenMPI, MPICH / Hydra, MVAPICH and PMIx.

An MPI launcher exports a rank, a world size and the local rank and size, but no node index and no
host list. The node index is derived (block_node_rank); the hosts come from a host file that the
user named in the environment, else from the Slurm job around the launcher. Under PBS, SGE and LSF
the scheduler's environment (batch.py) wraps the launcher and reads the scheduler's host file.
"""

from __future__ import annotations

from collections.abc import Mapping
from functools import cached_property
from typing import ClassVar

from zerokit.cluster.base import ClusterEnvironment, block_node_rank, hostfile_hosts
from zerokit.cluster.slurm import allocation_hosts, allocation_job_id, started_by_srun


class MpiEnvironment(ClusterEnvironment):
    hostfile_variables: ClassVar[tuple[str, ...]] = ()  # host files the user may name, first set wins
    block_fix: ClassVar[str]  # how to place ranks in equal blocks per node

    @property
    def node_rank(self) -> int:
        return block_node_rank(
            self.rank, self.local_rank, self.local_world_size, self.world_size, self.title, self.block_fix
        )

    @cached_property
    def hosts(self) -> tuple[str, ...]:
        variable = next((v for v in self.hostfile_variables if self.environ.get(v, "").strip()), None)
        return hostfile_hosts(self.environ, variable) if variable else allocation_hosts(self.environ)

    @property
    def job_id(self) -> str | None:
        return allocation_job_id(self.environ)


def launched_by(launcher: type[MpiEnvironment], environ: Mapping[str, str]) -> bool:
    """Whether every value in the launcher's table is set, by that launcher rather than by srun."""
    present = all(any(v in environ for v in names) for names in launcher.variables.values())
    return present and not started_by_srun(launcher(environ))
