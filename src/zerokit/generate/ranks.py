"""generate's ranks under `launch`: data parallel over groups of --tp-size ranks that share one model.

Rows are dealt in steps of batch_size x groups: at each step group g takes the g-th batch of the next rows,
and rank 0 gathers every group's rows (torch.distributed gather_object) and writes them. Why a gather, not
part files that rank 0 merges: the output keeps one writer; rows reach it in input order as they finish, so
an interrupted run leaves a prefix of the rows and `--resume` deals the rest the same way; and ranks on other
nodes need no file system shared with rank 0. The cost is one small collective per step, where the ranks
wait for the step's slowest batch. With one rank per group, a run on N ranks makes the same batches as one
rank does, so greedy (and seeded) output is the same whatever the number of ranks.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, TypeVar

from zerokit.foundations.errors import UserError

T = TypeVar("T")


class SaidByRankZero(UserError):
    """A refusal every rank raises alike (its inputs are the same on each, or rank 0 made it and told the
    others): rank 0 says it, in one line, not one line per rank."""

    every_rank = True


@contextmanager
def alike_on_every_rank() -> Iterator[None]:
    """Input errors found by every rank alike, said once."""
    try:
        yield
    except UserError as error:
        if error.every_rank:
            raise
        raise SaidByRankZero(str(error)) from None


@dataclass
class Ranks:
    rank: int = 0
    world_size: int = 1
    tp_size: int = 1
    objects_group: Any = None  # the gloo group that carries Python objects (the default group under gloo)
    tp_group: Any = None  # this rank's tensor-parallel group, when there are several

    @property
    def groups(self) -> int:
        return self.world_size // self.tp_size

    @property
    def group(self) -> int:
        return self.rank // self.tp_size

    @property
    def writer(self) -> bool:
        return self.rank == 0

    def steps(self, rows: Sequence[T], batch_size: int) -> Iterator[list[T]]:
        """This rank's batch at each step (empty when the rows ran out before its turn); every rank takes the
        same number of steps, so each reaches every gather."""
        step = batch_size * self.groups
        for start in range(0, len(rows), step):
            own = start + self.group * batch_size
            yield list(rows[own : min(own + batch_size, start + step)])

    def gather(self, value: T, every_rank: bool = False) -> list[T]:
        """On rank 0, the value of the first rank of each group, in group order (the others' are the same), or
        with every_rank that of every rank; elsewhere, []."""
        if self.world_size == 1:
            return [value]
        import torch.distributed as dist

        found: list[Any] | None = [None] * self.world_size if self.writer else None
        dist.gather_object(value, found, dst=0, group=self.objects_group)
        if found is None:
            return []
        return found if every_rank else [found[r] for r in range(0, self.world_size, self.tp_size)]

    def agree(self, make: Callable[[], T]) -> T:
        """make() on rank 0, its result on every rank; a UserError it raises is raised on every rank (the
        ranks would wait for rank 0 forever otherwise), in one line from rank 0."""
        if self.world_size == 1:
            return make()
        import torch.distributed as dist

        box: list[Any] = [None]
        if self.writer:
            try:
                box = [("ok", make())]
            except UserError as error:
                box = [("error", str(error))]
        dist.broadcast_object_list(box, src=0, group=self.objects_group)
        kind, value = box[0]
        if kind == "error":
            raise SaidByRankZero(value)
        return value


def start(tp_size: int) -> Ranks:
    """This process's place among generate's ranks (one rank alone when launch set no WORLD_SIZE), with the
    process group started and launch's stall watch fed."""
    world_size, rank = int(os.environ.get("WORLD_SIZE", "1")), int(os.environ.get("RANK", "0"))
    if world_size % tp_size:
        raise UserError(f"--tp-size {tp_size} does not divide the {world_size} ranks: give a divisor of {world_size}")
    if world_size == 1:
        return Ranks()
    import torch
    import torch.distributed as dist

    from zerokit.launch.rank import progress

    progress.start(os.environ, collectives=True, trainer_steps=False)
    backend = "nccl" if torch.cuda.is_available() else "gloo"
    if backend == "nccl":
        torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", "0")))
    dist.init_process_group(backend)
    objects = dist.new_group(backend="gloo") if backend == "nccl" else None
    tp_group = None
    if 1 < tp_size < world_size:  # several groups: each its own (every rank makes every group)
        made = [dist.new_group(list(range(g * tp_size, (g + 1) * tp_size))) for g in range(world_size // tp_size)]
        tp_group = made[rank // tp_size]
    return Ranks(rank, world_size, tp_size, objects, tp_group)
