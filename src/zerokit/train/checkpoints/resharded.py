"""A resharded resume: a checkpoint written by another number of ranks, resumed in its universal form and with
the global batch it was trained with (zerokit.train.sizing.global_batch).

Every rank decides alike, from the checkpoint's files, before the ranks meet
(zerokit.outputs.universal.needs_conversion); once they have
met, rank 0 converts a checkpoint that has no universal form yet (zerokit.outputs.universal: written beside
its shards, which stay) while the others wait at a barrier (`Resharding.convert_once`). A conversion longer
than the process group's timeout (--ddp_timeout, 1800 s by default) ends the job: convert such a checkpoint
ahead, with `zerokit universal`.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from zerokit.outputs.checkpoints import ranks, saved_world_size
from zerokit.train.sizing.global_batch import kept_accumulation


@dataclass(frozen=True)
class Resharding:
    """A resume of checkpoint by world ranks (data_parallel of them data-parallel) in its universal form."""

    checkpoint: Path
    world: int
    data_parallel: int
    convert: bool  # no universal form yet: rank 0 writes it once the ranks have met (needs_conversion)

    def accumulation_flags(self, micro: int, given: int | None, notes: list[str]) -> list[str]:
        """The --gradient_accumulation_steps that keeps the checkpoint's global batch (none where it recorded none)."""
        kept = kept_accumulation(self.checkpoint, micro, self.data_parallel, given, notes)
        return [] if kept is None else ["--gradient_accumulation_steps", str(kept)]

    def convert_once(self, rank: int) -> None:
        """Rank 0 writes the universal form if there is none yet, every rank waits for it; after the ranks met."""
        if not self.convert:
            return
        import torch.distributed as dist

        from zerokit.outputs.universal import convert

        if rank == 0:
            print(
                f"zerokit: checkpoint {self.checkpoint} was written by {ranks(saved_world_size(self.checkpoint))}, "
                f"this run has {self.world}: converting it to its universal form once (beside the original)",
                flush=True,
            )
            convert(self.checkpoint)
        if dist.is_available() and dist.is_initialized():
            dist.barrier()
