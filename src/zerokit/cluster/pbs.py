"""OpenPBS / PBS Pro (and Torque): ranks from the MPI launcher, hosts from PBS_NODEFILE.

PBS_NODEFILE lists a host once per slot (mpiprocs), the job's first host first. PBS_NODENUM,
PBS_VNODENUM and PBS_TASKNUM are not read: the job script has them too (node 0, task 1), so they
cannot tell a rank from the script, and pbsdsh tasks are numbered by slot, not by rank. Start the
ranks with the MPI launcher (`mpiexec`, `mpirun`; PALS on Cray), which numbers them.
"""

from __future__ import annotations

from collections.abc import Mapping
from functools import cached_property

from zerokit.cluster.base import hostfile_hosts
from zerokit.cluster.batch import BatchJobEnvironment, find_mpi_launcher
from zerokit.cluster.tools import MPIRUN

VARIABLES: dict[str, tuple[str, ...]] = {"job_id": ("PBS_JOBID",)}


class PbsEnvironment(BatchJobEnvironment):
    name = "pbs"
    title = "PBS"
    variables = VARIABLES
    job_variables = ("PBS_JOBID",)
    multi_node_tools = (MPIRUN,)
    hosts_from = "PBS_NODEFILE unset or empty"

    @staticmethod
    def detect(environ: Mapping[str, str]) -> bool:
        return "PBS_JOBID" in environ and find_mpi_launcher(environ) is not None

    @cached_property
    def hosts(self) -> tuple[str, ...]:
        return hostfile_hosts(self.environ, "PBS_NODEFILE")
