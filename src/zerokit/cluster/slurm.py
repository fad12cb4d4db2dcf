"""Slurm, for ranks that `srun` started.

A batch script is task 0 of the batch step and has SLURM_PROCID=0 too, but no SLURM_STEP_ID: srun
sets that for the steps it creates, and slurmstepd's setup_env() (src/common/env.c) skips the batch
step's id, which is negative as an int. So both are required: a batch script, or a launcher run from
it, is not a Slurm environment. A shell started by `srun --pty` (or by salloc, where it opens an
interactive step) is a one-task step, and is detected as one.

The step's variables win over the job's: SLURM_NODEID counts the step's nodes, and `srun -E` keeps
the job's SLURM_NTASKS and SLURM_TASKS_PER_NODE in a step that may be smaller.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from functools import cached_property

from zerokit.cluster.base import ClusterEnvironment, nodelist_hosts
from zerokit.cluster.tools import SRUN
from zerokit.foundations.errors import UserError

VARIABLES: dict[str, tuple[str, ...]] = {
    "rank": ("SLURM_PROCID",),
    "local_rank": ("SLURM_LOCALID",),
    "world_size": ("SLURM_STEP_NUM_TASKS", "SLURM_NTASKS", "SLURM_NPROCS"),
    # Compressed per-node counts like "2(x3),1", or SLURM_NTASKS_PER_NODE: one count for every node.
    "local_world_size": ("SLURM_STEP_TASKS_PER_NODE", "SLURM_TASKS_PER_NODE", "SLURM_NTASKS_PER_NODE"),
    "node_rank": ("SLURM_NODEID",),
    "job_id": ("SLURM_JOB_ID", "SLURM_JOBID"),
}
NODELISTS = ("SLURM_STEP_NODELIST", "SLURM_JOB_NODELIST", "SLURM_NODELIST")
# The whole allocation, for launchers other than srun that run inside a Slurm job (mpirun).
ALLOCATION_NODELISTS = ("SLURM_JOB_NODELIST", "SLURM_NODELIST")

_COUNT = re.compile(r"([0-9]+)(?:\(x([0-9]+)\))?")


def tasks_per_node(variable: str, value: str) -> tuple[int, ...]:
    """Slurm's compressed per-node counts, expanded: "2(x3),1" -> (2, 2, 2, 1)."""
    counts: list[int] = []
    for part in value.split(","):
        match = _COUNT.fullmatch(part.strip())
        if match is None:
            raise UserError(f"{variable}={value!r} is not a list of task counts like 2(x3),1: let srun set it")
        counts += [int(match[1])] * int(match[2] or 1)
    return tuple(counts)


class SlurmEnvironment(ClusterEnvironment):
    name = "slurm"
    title = "Slurm"
    variables = VARIABLES
    job_variables = ("SLURM_JOB_ID",)
    multi_node_tools = (SRUN,)
    hosts_from = f"no {', '.join(NODELISTS)}"
    start_fix = "start the ranks with `srun` and leave the SLURM_* variables to it"
    address_fix = "`srun --export=ALL,MASTER_ADDR=<first host>`"
    # A batch script has SLURM_NTASKS of the whole job but is task 0 of no step: only a rank says more.
    several_ranks_from = ("rank",)

    @staticmethod
    def detect(environ: Mapping[str, str]) -> bool:
        return "SLURM_PROCID" in environ and "SLURM_STEP_ID" in environ

    @property
    def local_world_size(self) -> int:
        variable = self._first_set("local_world_size")
        if variable in (None, "SLURM_NTASKS_PER_NODE"):
            return self._count("local_world_size")  # one count for every node, or the error naming them
        value = self.environ[variable]
        counts = tasks_per_node(variable, value)
        node = self.node_rank
        if node >= len(counts):
            raise UserError(f"SLURM_NODEID={node} has no entry in {variable}={value!r}: {self.start_fix}")
        if counts[node] < 1:
            raise UserError(f"{variable}={value!r} gives node {node} no task: {self.start_fix}")
        return counts[node]

    @cached_property
    def hosts(self) -> tuple[str, ...]:
        return next((nodelist_hosts(self.environ, v) for v in NODELISTS if self.environ.get(v, "").strip()), ())


def allocation_hosts(environ: Mapping[str, str]) -> tuple[str, ...]:
    """The nodes of the Slurm job this process runs in, () outside one."""
    return next((nodelist_hosts(environ, v) for v in ALLOCATION_NODELISTS if environ.get(v, "").strip()), ())


def allocation_job_id(environ: Mapping[str, str]) -> str | None:
    return next((environ[v].strip() for v in VARIABLES["job_id"] if environ.get(v, "").strip()), None)


def started_by_srun(launcher: ClusterEnvironment) -> bool:
    """Whether srun itself set the MPI variables `launcher` reads (`srun --mpi=pmi2`, `cray_shasta`).

    Then they agree with SLURM_*. The ranks of an mpirun or mpiexec run inside a Slurm job instead
    inherit the SLURM_* variables of the daemons that srun started for it, which disagree.
    """
    if not SlurmEnvironment.detect(launcher.environ):
        return False
    slurm = SlurmEnvironment(launcher.environ)
    try:
        return all(
            getattr(slurm, field) == getattr(launcher, field)
            for field in ("rank", "local_rank", "world_size", "local_world_size")
        )
    except UserError:
        return False
