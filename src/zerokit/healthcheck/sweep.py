"""A barrier, then all-reduce and all-gather over a size sweep, timed and reported as nccl-tests does.

nccl-tests' definitions (doc/PERFORMANCE.md of NVIDIA/nccl-tests), so a site compares with its figures:
- size: bytes of the buffer the operation produces (for all-gather, the whole gathered buffer);
- algbw = size / time;
- busbw = algbw * 2(n-1)/n for all-reduce, algbw * (n-1)/n for all-gather (n ranks): the bandwidth
  each link must carry, comparable with the hardware's peak whatever n is.
The sweep doubles from 8 B to 128 MiB on GPUs (all_reduce_perf -b 8 -e 128M -f 2); on CPU ranks it
is smaller (4 KiB to 4 MiB, x4) so that a check of two nodes stays within seconds.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from functools import partial

GPU_SIZES = tuple(8 * 2**i for i in range(25))  # 8 B .. 128 MiB
CPU_SIZES = tuple(4096 * 4**i for i in range(6))  # 4 KiB .. 4 MiB
ELEMENT_BYTES = 4  # float32
BUS_FACTORS = {"all_reduce": lambda n: 2 * (n - 1) / n, "all_gather": lambda n: (n - 1) / n}


@dataclass(frozen=True)
class Timing:
    op: str  # "all_reduce", "all_gather"
    size: int  # bytes, as nccl-tests counts them
    seconds: float  # per operation: the mean over the timed iterations, the slowest rank's

    def algbw(self) -> float:
        """bytes/s"""
        return self.size / self.seconds

    def busbw(self, ranks: int) -> float:
        return bus_bandwidth(self.op, self.algbw(), ranks)


def bus_bandwidth(op: str, algbw: float, ranks: int) -> float:
    return algbw * BUS_FACTORS[op](ranks)


def sizes(on_gpu: bool) -> tuple[int, ...]:
    return GPU_SIZES if on_gpu else CPU_SIZES


def iterations(on_gpu: bool) -> tuple[int, int]:
    """(warm-up, timed) iterations per size: nccl-tests' 5 and 20 on GPUs, fewer on CPU."""
    return (5, 20) if on_gpu else (1, 4)


def time_barrier(dist, rounds: int = 10) -> float:
    """Seconds per barrier, the mean of `rounds`."""
    dist.barrier()
    start = time.perf_counter()
    for _ in range(rounds):
        dist.barrier()
    return (time.perf_counter() - start) / rounds


def run_sweep(dist, torch, device, on_gpu: bool) -> list[Timing]:
    """Every size of the sweep, all-reduce then all-gather; the same list on every rank."""
    ranks = dist.get_world_size()
    warmup, timed = iterations(on_gpu)
    timings = []
    for size in sizes(on_gpu):
        count = max(1, size // ELEMENT_BYTES)
        data = torch.ones(count, dtype=torch.float32, device=device)
        seconds = _timed(dist, torch, warmup, timed, on_gpu, partial(dist.all_reduce, data))
        timings.append(Timing("all_reduce", data.numel() * ELEMENT_BYTES, seconds))
        part = torch.ones(max(1, count // ranks), dtype=torch.float32, device=device)
        gathered = torch.empty(part.numel() * ranks, dtype=torch.float32, device=device)
        seconds = _timed(dist, torch, warmup, timed, on_gpu, partial(_all_gather(dist), gathered, part))
        timings.append(Timing("all_gather", gathered.numel() * ELEMENT_BYTES, seconds))
    return timings


def _all_gather(dist):
    """torch 2.13 renamed all_gather_into_tensor to all_gather_single (the old name warns)."""
    return getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor


def _timed(dist, torch, warmup: int, timed: int, on_gpu: bool, operation) -> float:
    for _ in range(warmup):
        operation()
    _sync(torch, on_gpu)
    dist.barrier()
    start = time.perf_counter()
    for _ in range(timed):
        operation()
    _sync(torch, on_gpu)
    mine = torch.tensor([(time.perf_counter() - start) / timed], dtype=torch.float64)
    if on_gpu:
        mine = mine.cuda()
    dist.all_reduce(mine, op=dist.ReduceOp.MAX)
    return float(mine.item())


def _sync(torch, on_gpu: bool) -> None:
    if on_gpu:
        torch.cuda.synchronize()
