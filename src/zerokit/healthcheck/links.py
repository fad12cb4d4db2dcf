"""Point-to-point tests of every node pair, between one rank per node (its first), in rounds.

The pairs are scheduled as a round-robin tournament (the circle method): in each round every node is
in at most one pair, so a node's link is measured alone and a slow one is not blamed on its partner.
n nodes take n-1 rounds (n for an odd n). Per pair: the latency (half a round trip of 8 bytes) and the
bandwidth each way (a large message and an 8-byte ack, bytes / time), each the best of several tries:
a busy CPU only ever adds time, while a slow link slows every try.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

LATENCY_ROUNDS = 20
BANDWIDTH_ROUNDS = 3
CPU_MESSAGE = 4 * 2**20  # bytes
GPU_MESSAGE = 64 * 2**20


@dataclass(frozen=True)
class Link:
    a: str  # host names
    b: str
    latency: float  # seconds, one way
    a_to_b: float  # bytes/s
    b_to_a: float

    @property
    def bandwidth(self) -> float:
        """The slower direction."""
        return min(self.a_to_b, self.b_to_a)


def rounds(count: int) -> list[list[tuple[int, int]]]:
    """Round-robin pairs of 0..count-1 (circle method): every pair exactly once, nobody twice in a round."""
    players: list[int | None] = list(range(count)) + ([None] if count % 2 else [])
    schedule = []
    for _ in range(len(players) - 1):
        half = len(players) // 2
        pairs = [(players[i], players[-1 - i]) for i in range(half)]
        schedule.append([(min(a, b), max(a, b)) for a, b in pairs if a is not None and b is not None])
        players = [players[0], players[-1], *players[1:-1]]
    return schedule


def measure_links(dist, torch, device, leaders: list[int], hosts: list[str], on_gpu: bool) -> list[dict]:
    """Run every round; each rank returns what it measured as pinger ({a, b, latency, a_to_b}) or
    as the other end ({a, b, b_to_a}). Every rank of the job takes part in the barriers between rounds."""
    me = dist.get_rank()
    size = GPU_MESSAGE if on_gpu else CPU_MESSAGE
    small = torch.zeros(2, dtype=torch.float32, device=device)
    big = torch.zeros(size // 4, dtype=torch.float32, device=device)
    found = []
    for pairs in rounds(len(leaders)):
        dist.barrier()
        for i, j in pairs:
            a, b = leaders[i], leaders[j]
            if me == a:
                latency = _ping(dist, torch, small, b, on_gpu, first=True)
                there = _stream(dist, torch, big, small, b, on_gpu, sending=True)
                _stream(dist, torch, big, small, b, on_gpu, sending=False)
                found.append({"a": hosts[i], "b": hosts[j], "latency": latency, "a_to_b": there})
            elif me == b:
                _ping(dist, torch, small, a, on_gpu, first=False)
                _stream(dist, torch, big, small, a, on_gpu, sending=False)
                back = _stream(dist, torch, big, small, a, on_gpu, sending=True)
                found.append({"a": hosts[i], "b": hosts[j], "b_to_a": back})
    dist.barrier()
    return found


def merge(measured: list[dict]) -> list[Link]:
    """The pinger's and the other end's halves, joined into one Link per pair."""
    halves: dict[tuple[str, str], dict] = {}
    for part in measured:
        halves.setdefault((part["a"], part["b"]), {}).update(part)
    return [Link(a, b, h["latency"], h["a_to_b"], h["b_to_a"]) for (a, b), h in halves.items()]


def _ping(dist, torch, small, peer: int, on_gpu: bool, first: bool) -> float:
    times = [_exchange(dist, torch, small, small, peer, on_gpu, first) / 2 for _ in range(LATENCY_ROUNDS + 2)]
    return min(times[2:])


def _stream(dist, torch, big, small, peer: int, on_gpu: bool, sending: bool) -> float:
    """bytes/s of `big` to (or from) peer; the sender times it up to the receiver's ack."""
    best = min(_exchange(dist, torch, big, small, peer, on_gpu, sending) for _ in range(BANDWIDTH_ROUNDS))
    return big.numel() * big.element_size() / best


def _exchange(dist, torch, out, back, peer: int, on_gpu: bool, sending: bool) -> float:
    """Seconds for `out` to go one way and `back` the other; the sending side sends `out` first."""
    _sync(torch, on_gpu)
    start = time.perf_counter()
    if sending:
        dist.send(out, peer)
        dist.recv(back, peer)
    else:
        dist.recv(out, peer)
        dist.send(back, peer)
    _sync(torch, on_gpu)
    return time.perf_counter() - start


def _sync(torch, on_gpu: bool) -> None:
    if on_gpu:
        torch.cuda.synchronize()
