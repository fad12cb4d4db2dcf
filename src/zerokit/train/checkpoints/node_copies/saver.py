"""`train --memory-checkpoints K`: every K steps a checkpoint in the nodes' host memory, each node's copy in the next
node's memory too, so that a lost node costs at most K steps (zerokit.train.checkpoints.node_copies.recovery rebuilds
the checkpoint).

The copy is the background save (zerokit.train.engines.hf_trainer), written elsewhere: the Trainer's save runs as
for a disk checkpoint, its large files copied into the host snapshot's buffers, its small ones written, into the
node's store (zerokit.train.checkpoints.node_copies.store) instead of the output folder; the writer thread writes the
large ones there too, the ranks agree that every file is written, and then the first rank of each node seals its
node's copy and swaps copies with its neighbours (zerokit.train.checkpoints.node_copies.ring). Nothing reaches the
output folder: `--resume auto` takes a memory copy only once a restart has rebuilt it there. A copy comes at a step
end that saves no disk checkpoint, never at the last step; like any save it first waits for the one before it (that
wait is its stall's, recorded).
"""

from __future__ import annotations

import socket
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from zerokit.foundations.errors import RunFailure
from zerokit.train.checkpoints.node_copies.ring import Nodes, Ring
from zerokit.train.checkpoints.node_copies.store import DEFAULT_ROOT, NodeStore, seal
from zerokit.train.checkpoints.writer import SaveFigures


@dataclass(frozen=True)
class MemoryPlan:
    """What --memory-checkpoints asks: a copy every `every` steps, in `root`, of the run in output_dir."""

    every: int
    root: Path
    output_dir: Path

    @classmethod
    def of(cls, every: int | None, root: Path | None, output_dir: Path) -> MemoryPlan | None:
        return cls(every, root or DEFAULT_ROOT, output_dir) if every else None


class MemoryCheckpoints:
    """One rank's part in the memory checkpoints. Every rank makes it at the same point, the process group up: it
    finds the nodes (each rank's host name) and makes the ring's group."""

    def __init__(self, plan: MemoryPlan) -> None:
        import torch.distributed as dist

        self.plan = plan
        host = socket.gethostname()
        rank, world = (dist.get_rank(), dist.get_world_size()) if dist.is_initialized() else (0, 1)
        hosts = [host] * world
        if world > 1:
            dist.all_gather_object(hosts, host)
        self.nodes = Nodes.of(hosts)
        self.ring = Ring(self.nodes, rank)
        self.world = world
        self.store = NodeStore.of(plan.root, plan.output_dir, host)

    @property
    def first(self) -> bool:
        """Whether this rank seals its node's copies and swaps them (the node's first rank)."""
        return self.ring.first

    def due(self, step: int, max_steps: int) -> bool:
        return step % self.plan.every == 0 and step < max_steps

    def staging(self, step: int) -> Path:
        """The folder the Trainer's save writes the copy of step into (as into `tmp-checkpoint-N` on disk)."""
        return self.store.staging("own", step)

    def publish(self, written: Path, step: int, figures: SaveFigures) -> int:
        """On a node's first rank, once every rank's files are written: the node's copy sealed, then sent to the
        next node while the one before's is received and sealed (its time and size in figures). The bytes of this
        node's copy."""
        own = seal(written, self.store.side("own"), step, self.ring.node, self.nodes.count, self.world)
        size = sum(path.stat().st_size for path in own.rglob("*") if path.is_file())
        if self.ring.group is None:
            return size
        started = time.monotonic()
        received = self.store.staging("peer", step)
        figures.peer_bytes = self.ring.exchange(own, received)
        seal(received, self.store.side("peer"), step)
        figures.peer_seconds = time.monotonic() - started
        return size

    def discard(self) -> None:
        """The run's end: this node's copies are dropped (they hold host memory), by its first rank."""
        if self.first:
            self.store.clear()


class MemoryCopyFailed(RunFailure):
    """A memory checkpoint could not be written or swapped: the run ends, its disk checkpoints intact."""


@contextmanager
def naming_a_failed_copy(store: Path, name: str) -> Iterator[None]:
    """Turn what failed in a memory copy (a full tmpfs, a neighbour gone) into one line naming the store and the way
    on. The run ends: the other ranks' next collective waits for this rank, so going on without copies on this one
    alone would hold them (launch ends them once this rank has ended)."""
    try:
        yield
    except Exception as error:
        why = str(error).splitlines()[0] if str(error) else type(error).__name__
        raise MemoryCopyFailed(
            f"the memory copy of {name} in {store} failed ({why}): give the store more room (--memory-checkpoint-dir) "
            "or leave --memory-checkpoints out; the disk's checkpoints are intact: --resume auto"
        ) from error
