"""Sun / Univa / Altair Grid Engine (SGE, UGE, AGE; ABCI): ranks from the MPI launcher, hosts
from the job's host file.

PE_HOSTFILE has one line per host: "host slots queue processors". ABCI also writes a plain list
of hosts to SGE_JOB_HOSTLIST. NSLOTS counts slots, not ranks, and is not read. An array task's
job id is JOB_ID.SGE_TASK_ID, as qstat prints it (SGE_TASK_ID is "undefined" outside arrays), so
two tasks of one array on a node get different ports.
"""

from __future__ import annotations

from collections.abc import Mapping
from functools import cached_property

from zerokit.cluster.base import hostfile_hosts
from zerokit.cluster.batch import BatchJobEnvironment, find_mpi_launcher
from zerokit.cluster.tools import MPIRUN

VARIABLES: dict[str, tuple[str, ...]] = {"job_id": ("JOB_ID",)}
HOSTFILES = ("PE_HOSTFILE", "SGE_JOB_HOSTLIST")


class SgeEnvironment(BatchJobEnvironment):
    name = "sge"
    title = "SGE"
    variables = VARIABLES
    job_variables = ("PE_HOSTFILE",)
    multi_node_tools = (MPIRUN,)
    hosts_from = f"{' and '.join(HOSTFILES)} unset or empty"

    @staticmethod
    def detect(environ: Mapping[str, str]) -> bool:
        """JOB_ID is too common a name to mean SGE alone: a host file of SGE's must be named too."""
        in_job = "JOB_ID" in environ and any(v in environ for v in HOSTFILES)
        return in_job and find_mpi_launcher(environ) is not None

    @cached_property
    def hosts(self) -> tuple[str, ...]:
        variable = next((v for v in HOSTFILES if self.environ.get(v, "").strip()), None)
        return hostfile_hosts(self.environ, variable) if variable else ()

    @property
    def job_id(self) -> str | None:
        job_id, task = super().job_id, self.environ.get("SGE_TASK_ID", "").strip()
        return f"{job_id}.{task}" if job_id and task.isdigit() else job_id
