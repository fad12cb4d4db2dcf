"""IBM Spectrum LSF: ranks from jsrun (JSM_NAMESPACE_*) or from the MPI launcher, hosts from
LSB_DJOB_HOSTFILE.

LSB_DJOB_HOSTFILE lists a host once per slot. On systems with jsrun (CSM: Summit, Sierra,
Lassen) its first host is the launch node that runs the job script, where jsrun starts no rank;
it is left out there, as Lightning's LSFEnvironment does. LSB_MCPU_HOSTS ("host slots host slots
...") stands in when the file is not named. An array element's job id is LSB_JOBID[LSB_JOBINDEX],
as bjobs prints it, so two elements of one array on a node get different ports.
"""

from __future__ import annotations

from collections.abc import Mapping
from functools import cached_property

from zerokit.cluster.base import ClusterEnvironment, hostfile_hosts, unique
from zerokit.cluster.batch import BatchJobEnvironment, find_mpi_launcher
from zerokit.cluster.mpi import MpiEnvironment, launched_by
from zerokit.cluster.tools import MPIRUN

VARIABLES: dict[str, tuple[str, ...]] = {"job_id": ("LSB_JOBID",)}
JSRUN_VARIABLES: dict[str, tuple[str, ...]] = {
    "rank": ("JSM_NAMESPACE_RANK",),
    "local_rank": ("JSM_NAMESPACE_LOCAL_RANK",),
    "world_size": ("JSM_NAMESPACE_SIZE",),
    "local_world_size": ("JSM_NAMESPACE_LOCAL_SIZE",),
}


class JsrunEnvironment(MpiEnvironment):
    """jsrun, LSF's launcher on CSM systems: only ever read inside an LsfEnvironment."""

    name = "jsrun"
    title = "jsrun"
    variables = JSRUN_VARIABLES
    hosts_from = "none from jsrun; LsfEnvironment reads LSB_DJOB_HOSTFILE"
    start_fix = "start the ranks with `jsrun` and leave the JSM_NAMESPACE_* variables to it"
    address_fix = "`export MASTER_ADDR=<first host>` before `jsrun`"
    block_fix = "start the same number of consecutive ranks on every host"

    @staticmethod
    def detect(environ: Mapping[str, str]) -> bool:
        return launched_by(JsrunEnvironment, environ)


class LsfEnvironment(BatchJobEnvironment):
    name = "lsf"
    title = "LSF"
    variables = VARIABLES
    job_variables = ("LSB_JOBID",)
    multi_node_tools = (MPIRUN,)
    hosts_from = "LSB_DJOB_HOSTFILE and LSB_MCPU_HOSTS unset or empty"
    start_fix = "start the ranks with `jsrun`, `mpirun` or `mpiexec` inside the job"

    @staticmethod
    def detect(environ: Mapping[str, str]) -> bool:
        return "LSB_JOBID" in environ and _launcher(environ) is not None

    def _find_launcher(self) -> ClusterEnvironment | None:
        return _launcher(self.environ)

    @cached_property
    def hosts(self) -> tuple[str, ...]:
        if self.environ.get("LSB_DJOB_HOSTFILE", "").strip():
            hosts = hostfile_hosts(self.environ, "LSB_DJOB_HOSTFILE")
        else:
            hosts = unique(self.environ.get("LSB_MCPU_HOSTS", "").split()[::2])
        return hosts[1:] if JsrunEnvironment.detect(self.environ) else hosts

    @property
    def job_id(self) -> str | None:
        job_id, index = super().job_id, self.environ.get("LSB_JOBINDEX", "").strip()
        return f"{job_id}[{index}]" if job_id and index.isdigit() and index != "0" else job_id


def _launcher(environ: Mapping[str, str]) -> ClusterEnvironment | None:
    return JsrunEnvironment(environ) if JsrunEnvironment.detect(environ) else find_mpi_launcher(environ)
