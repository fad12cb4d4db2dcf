"""torch.distributed's own variables, as torchrun (TorchElastic) sets them for each worker.

`zerokit launch` and DeepSpeed's launcher set the same RANK, LOCAL_RANK, WORLD_SIZE and MASTER_*;
DeepSpeed's names for the local size and the node (LOCAL_SIZE, CROSS_RANK) are read as fallbacks.
torchrun exports no host list: the main address is its MASTER_ADDR.
"""

from __future__ import annotations

from collections.abc import Mapping

from zerokit.cluster.base import ClusterEnvironment, block_node_rank
from zerokit.cluster.tools import HEAD_NODE_TOOLS

VARIABLES: dict[str, tuple[str, ...]] = {
    "rank": ("RANK",),
    "local_rank": ("LOCAL_RANK",),
    "world_size": ("WORLD_SIZE",),
    "local_world_size": ("LOCAL_WORLD_SIZE", "LOCAL_SIZE"),
    "node_rank": ("GROUP_RANK", "CROSS_RANK"),
    "job_id": ("TORCHELASTIC_RUN_ID",),
}
# torchrun's --rdzv-id when none is given: not a job id.
NO_RUN_ID = "none"


class TorchrunEnvironment(ClusterEnvironment):
    name = "torchrun"
    title = "torchrun"
    variables = VARIABLES
    job_variables = ()
    multi_node_tools = HEAD_NODE_TOOLS
    hosts_from = "torchrun exports none"
    start_fix = (
        "start the ranks with `torchrun` or `zerokit launch`, which set RANK, LOCAL_RANK, WORLD_SIZE "
        "and LOCAL_WORLD_SIZE together"
    )
    address_fix = "MASTER_ADDR=<first host> in every rank's environment"

    @staticmethod
    def detect(environ: Mapping[str, str]) -> bool:
        """RANK and WORLD_SIZE: what env:// initialisation needs, whoever set them."""
        return "RANK" in environ and "WORLD_SIZE" in environ

    @property
    def hosts(self) -> tuple[str, ...]:
        return ()

    @property
    def node_rank(self) -> int:
        """GROUP_RANK (CROSS_RANK), else derived, which on one node gives 0."""
        if self._first_set("node_rank"):
            return super().node_rank
        fix = "set GROUP_RANK to the node's index"
        return block_node_rank(self.rank, self.local_rank, self.local_world_size, self.world_size, self.title, fix)

    @property
    def job_id(self) -> str | None:
        run_id = super().job_id
        return None if run_id == NO_RUN_ID else run_id
