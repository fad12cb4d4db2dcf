"""Flux (flux-core): tasks that `flux run` or `flux submit` started, in a `flux batch` job or not.

The job shell sets FLUX_TASK_RANK, FLUX_TASK_LOCAL_ID, FLUX_JOB_SIZE (tasks), FLUX_JOB_NNODES,
FLUX_JOB_ID and FLUX_URI in every task (flux-environment(7), "JOB ENVIRONMENT"). A batch script
or `flux alloc` shell is the initial program of a Flux instance, where Flux unsets the FLUX_TASK_*
and FLUX_JOB_* variables (FLUX_URI stays): it is no rank, as a Slurm batch script is not.

Flux exports neither a per-node task count nor a host list. The local size is FLUX_JOB_SIZE over
FLUX_JOB_NNODES, so the tasks must be spread evenly (`flux run -N2 --tasks-per-node=4`), and the
node index is derived from Flux's default block mapping; the main address comes from MASTER_ADDR,
which scripts/flux/train.sh exports from the instance's host list. The pmi shell plugin also sets
PMI_RANK and PMI_SIZE: Flux comes before MPICH in ENVIRONMENTS, so those tasks are Flux's.
"""

from __future__ import annotations

from collections.abc import Mapping

from zerokit.cluster.base import ClusterEnvironment, block_node_rank
from zerokit.cluster.tools import FLUX
from zerokit.foundations.errors import UserError

VARIABLES: dict[str, tuple[str, ...]] = {
    "rank": ("FLUX_TASK_RANK",),
    "local_rank": ("FLUX_TASK_LOCAL_ID",),
    "world_size": ("FLUX_JOB_SIZE",),
    "node_count": ("FLUX_JOB_NNODES",),
    "job_id": ("FLUX_JOB_ID",),
}
# F58, Flux's usual form of a job id: base58 digits after "ƒ" (or "f" outside UTF-8 locales).
F58_PREFIXES = ("ƒ", "f")
F58_DIGITS = "123456789ABCDEFGHJKLMNPQRSTUVWXYZabcdefghijkmnopqrstuvwxyz"


def f58_decode(job_id: str) -> str:
    """A Flux job id in decimal ("ƒ2HvSuK" -> its integer), as `flux job id` prints it; other forms unchanged."""
    digits = next((job_id[len(p) :] for p in F58_PREFIXES if job_id.startswith(p)), "")
    if not digits or any(d not in F58_DIGITS for d in digits):
        return job_id
    value = 0
    for digit in digits:
        value = value * len(F58_DIGITS) + F58_DIGITS.index(digit)
    return str(value)


class FluxEnvironment(ClusterEnvironment):
    name = "flux"
    title = "Flux"
    variables = VARIABLES
    job_variables = ("FLUX_URI",)
    multi_node_tools = (FLUX,)
    hosts_from = "Flux exports none to tasks"
    start_fix = "start the ranks with `flux run -N<nodes> --tasks-per-node=<ranks per node>` and leave FLUX_* to it"
    address_fix = "`export MASTER_ADDR=$(flux hostlist --nth=0 instance)` before `flux run` (scripts/flux/train.sh)"

    @staticmethod
    def detect(environ: Mapping[str, str]) -> bool:
        return "FLUX_TASK_RANK" in environ and "FLUX_JOB_SIZE" in environ

    @property
    def hosts(self) -> tuple[str, ...]:
        return ()

    @property
    def local_world_size(self) -> int:
        """FLUX_JOB_SIZE / FLUX_JOB_NNODES: Flux exports no per-node count."""
        size, nodes = self.world_size, self._count("node_count")
        if size % nodes:
            raise UserError(
                f"FLUX_JOB_SIZE={size} tasks on FLUX_JOB_NNODES={nodes} nodes cannot be the same number on every "
                f"node: {self.start_fix}"
            )
        return size // nodes

    @property
    def node_rank(self) -> int:
        fix = "keep Flux's default block task mapping (no --taskmap) and the same number of tasks per node"
        return block_node_rank(self.rank, self.local_rank, self.local_world_size, self.world_size, self.title, fix)

    @property
    def job_id(self) -> str | None:
        job_id = super().job_id
        return f58_decode(job_id) if job_id else None
