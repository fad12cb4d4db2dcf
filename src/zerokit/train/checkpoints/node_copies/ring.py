"""The ring of a job's nodes that memory checkpoints travel on (zerokit.train.checkpoints.node_copies.store): after each
copy, the first rank of node i sends its node's copy to the first rank of node i+1 (the last to the first), and receives
node i-1's, on a gloo group of their own, never the training's (whose collectives the training thread runs
meanwhile). A copy is sent in pieces of CHUNK bytes, so what is in flight is one piece each way, not a file (a
ZeRO-1/2 model states file holds the whole model) nor the node's share.

The peer writes what it receives into a staging folder and seals it (store.seal) only once every file is
there at its size: a node that dies mid-send leaves its peer's last whole copy in place.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any

from zerokit.train.checkpoints.node_copies.store import MANIFEST

SECONDS = 600  # a send or receive that waits longer fails (a node died: launch restarts the job before that)
CHUNK = 64 * 2**20  # bytes sent at once: what a swap holds in memory beside the copies, each way


@dataclass(frozen=True)
class Nodes:
    """The job's nodes as its ranks found them: each rank's node index, and the first rank of each node."""

    node_of_rank: tuple[int, ...]
    first_ranks: tuple[int, ...]
    hosts: tuple[str, ...]

    @classmethod
    def of(cls, host_of_rank: list[str]) -> Nodes:
        hosts = tuple(dict.fromkeys(host_of_rank))  # in the order of their first rank
        return cls(
            tuple(hosts.index(host) for host in host_of_rank),
            tuple(host_of_rank.index(host) for host in hosts),
            hosts,
        )

    @property
    def count(self) -> int:
        return len(self.hosts)


class Ring:
    """This rank's place in the ring (a node's first rank sends and receives; the others only join the group)."""

    def __init__(self, nodes: Nodes, rank: int) -> None:
        import torch.distributed as dist

        self.nodes = nodes
        self.node = nodes.node_of_rank[rank]
        self.first = nodes.first_ranks[self.node] == rank
        # Every rank makes every group; a node alone has no ring.
        self.group = (
            dist.new_group(list(nodes.first_ranks), backend="gloo", timeout=timedelta(seconds=SECONDS))
            if nodes.count > 1
            else None
        )

    @property
    def after(self) -> int:
        return self.nodes.first_ranks[(self.node + 1) % self.nodes.count]

    @property
    def before(self) -> int:
        return self.nodes.first_ranks[(self.node - 1) % self.nodes.count]

    def exchange(self, copy: Path, into: Path) -> int:
        """Send the whole copy in folder `copy` to the next node; write the previous node's into `into` (a staging
        folder, sealed by the caller). In CHUNK pieces, one in flight each way. The bytes received."""
        import torch
        import torch.distributed as dist

        mine = [(path, path.stat().st_size) for path in sorted(copy.rglob("*")) if path.is_file()]
        header = json.dumps([[str(path.relative_to(copy)), size] for path, size in mine]).encode()
        theirs = [(str(name), int(size)) for name, size in json.loads(self._swap(header).decode())]
        sends = [(path, start, min(CHUNK, size - start)) for path, size in mine for start in range(0, size, CHUNK)]
        receives = [
            (into / name, start, min(CHUNK, size - start)) for name, size in theirs for start in range(0, size, CHUNK)
        ]
        for name, _ in theirs:  # every file there, an empty one too; the chunks are written at their place
            (into / name).parent.mkdir(parents=True, exist_ok=True)
            (into / name).write_bytes(b"")
        buffer = torch.empty(min(CHUNK, max((length for *_, length in receives), default=0)), dtype=torch.uint8)
        for i in range(max(len(sends), len(receives))):
            work = None
            if i < len(sends):
                path, start, length = sends[i]
                chunk = bytearray(length)
                with path.open("rb") as handle:
                    handle.seek(start)
                    handle.readinto(chunk)
                work = dist.isend(torch.frombuffer(chunk, dtype=torch.uint8), self.after, group=self.group)
            if i < len(receives):
                target, start, length = receives[i]
                piece = buffer[:length]
                dist.recv(piece, self.before, group=self.group)
                with target.open("r+b") as handle:
                    handle.seek(start)
                    handle.write(piece.numpy())
            if work is not None:
                work.wait()
        if not (into / MANIFEST).is_file():
            raise OSError(f"the copy from node {self.before} came without its manifest")
        return sum(size for _, size in theirs)

    def _swap(self, data: bytes) -> bytes:
        """Send data to the next node and receive the previous node's (their lengths first)."""
        import torch
        import torch.distributed as dist

        length = torch.tensor([len(data)], dtype=torch.int64)
        theirs = torch.zeros(1, dtype=torch.int64)
        work = dist.isend(length, self.after, group=self.group)
        dist.recv(theirs, self.before, group=self.group)
        work.wait()
        sending = _bytes_tensor(data)
        work = dist.isend(sending, self.after, group=self.group)
        received = _received(int(theirs.item()), self.before, self.group)
        work.wait()
        return received


def _bytes_tensor(data: bytes) -> Any:
    import torch

    return torch.frombuffer(bytearray(data), dtype=torch.uint8) if data else torch.empty(0, dtype=torch.uint8)


def _received(size: int, source: int, group: Any) -> bytes:
    import torch
    import torch.distributed as dist

    if size == 0:
        return b""
    buffer = torch.empty(size, dtype=torch.uint8)
    dist.recv(buffer, source, group=group)
    return buffer.numpy().tobytes()
