"""A run's global batch, recorded in its checkpoints and kept when another number of data-parallel ranks resumes one.

The global batch is the samples of one optimizer step: per-device micro batch x gradient accumulation x
data-parallel ranks (world / (tp x pp)). RunRecorder writes it into each checkpoint's zerokit-run.json
("batch"); a resume on another number of data-parallel ranks (zerokit.train.checkpoints.resharded) sets the gradient
accumulation that makes the same global batch again from its micro batch, or is refused in one line naming
the sizes that would.

Keeping the global batch keeps the run's course, not only its step size. The learning-rate schedule counts
optimizer steps, so it continues at the checkpoint's. The data order continues too: the sampler's order is
drawn from --seed alone (accelerate's seedable sampler), whatever the rank count; accelerate hands rank r of
D the micro-batches r, r + D, r + 2D, ... of that order, and each rank accumulates A consecutive ones of its
own, so optimizer step k consumes micro-batches kDA to (k+1)DA - 1: the same contiguous block of
micro x A x D samples for every split of the global batch into A x D. A resume skips the Trainer's
global_step x A micro-batches per rank, global_step x global batch samples in all: exactly the samples the
checkpoint's run consumed (e2e/test_universal.py resumes 2 ranks x accumulation 1 on 1 rank x accumulation 2
on the uninterrupted run's curve).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from zerokit.foundations.errors import UserError
from zerokit.image.provenance import RECORD_NAME
from zerokit.outputs.checkpoints import ranks


@dataclass(frozen=True)
class GlobalBatch:
    """micro samples per device and step, accumulated `accumulation` times, on data_parallel ranks."""

    micro: int
    accumulation: int
    data_parallel: int

    @property
    def size(self) -> int:
        return self.micro * self.accumulation * self.data_parallel

    def __str__(self) -> str:
        return f"micro {self.micro} x accumulation {self.accumulation} x {replicas(self.data_parallel)}"

    def as_record(self) -> dict[str, int]:
        """zerokit-run.json's "batch"."""
        fields = {"micro": self.micro, "accumulation": self.accumulation, "data_parallel": self.data_parallel}
        return {**fields, "global": self.size}


def replicas(count: int) -> str:
    return ranks(count, "data-parallel")


def saved_batch(checkpoint: Path) -> GlobalBatch | None:
    """The batch checkpoint was trained with, from its zerokit-run.json; None where that holds none (a checkpoint
    of a zerokit before the record had it, or of the Trainer alone)."""
    try:
        batch = json.loads((checkpoint / RECORD_NAME).read_text())["batch"]
        return GlobalBatch(int(batch["micro"]), int(batch["accumulation"]), int(batch["data_parallel"]))
    except (OSError, ValueError, KeyError, TypeError):
        return None


def accumulation_for(saved: GlobalBatch, micro: int, data_parallel: int, checkpoint: Path) -> int:
    """The gradient accumulation that makes saved's global batch from micro on data_parallel ranks; one line
    naming the rank counts and micro batches that would, where none does."""
    if saved.size % (micro * data_parallel) == 0:
        return saved.size // (micro * data_parallel)
    raise UserError(
        f"checkpoint {checkpoint} was trained with a global batch of {saved.size} ({saved}); {replicas(data_parallel)} "
        f"with --per_device_train_batch_size {micro} cannot make {saved.size}: "
        + ways_to_make(saved.size, micro, data_parallel)
    )


def ways_to_make(size: int, micro: int, data_parallel: int) -> str:
    """The rank counts that make size from micro, and the micro batches that make it on data_parallel ranks."""
    ways = []
    if size % micro == 0:
        ways.append(f"resume on {or_list(divisors(size // micro))} data-parallel ranks with that micro batch")
    if size % data_parallel == 0:
        micros = or_list(divisors(size // data_parallel))
        ways.append(f"keep {replicas(data_parallel)} with --per_device_train_batch_size {micros}")
    if not ways:
        return f"pick data-parallel ranks and a --per_device_train_batch_size whose product divides {size}"
    return ", or ".join(ways)


def divisors(number: int) -> list[int]:
    return [d for d in range(1, number + 1) if number % d == 0]


def or_list(numbers: list[int]) -> str:
    """1, 2 or 4."""
    *head, last = map(str, numbers)
    return f"{', '.join(head)} or {last}" if head else last


def kept_accumulation(
    checkpoint: Path, micro: int, data_parallel: int, given: int | None, notes: list[str]
) -> int | None:
    """The gradient accumulation a resume of checkpoint on data_parallel ranks runs with: the one that keeps its
    global batch, said in notes (None: the run's own, for a checkpoint that recorded no batch: a warning in notes).

    given: --gradient_accumulation_steps as the user passed it (None: not passed); a value that would change
    the global batch is refused rather than overridden.
    """
    saved = saved_batch(checkpoint)
    if saved is None:
        notes.append(
            f"checkpoint {checkpoint} holds no record of its global batch (written before zerokit recorded it): "
            "resuming with the batch flags as given; keep micro x accumulation x data-parallel ranks as it was"
        )
        return None
    kept = accumulation_for(saved, micro, data_parallel, checkpoint)
    if given is not None and given != kept:
        raise UserError(
            f"--gradient_accumulation_steps {given} with micro {micro} on {replicas(data_parallel)} makes a global "
            f"batch of {micro * given * data_parallel}, and checkpoint {checkpoint} was trained with {saved.size} "
            f"({saved}): pass --gradient_accumulation_steps {kept}, or leave it out and train sets it"
        )
    change = f"{saved.accumulation} -> {kept}" if kept != saved.accumulation else f"{kept}"
    notes.append(
        f"checkpoint {checkpoint} was trained with {saved}, this run has {replicas(data_parallel)} and micro "
        f"{micro}: gradient accumulation {change} keeps the global batch of {saved.size}"
    )
    return kept
