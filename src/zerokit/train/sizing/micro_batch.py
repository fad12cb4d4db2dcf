"""`--micro-batch auto`: the largest per-device micro-batch that fits, chosen once the model is built and before the
Trainer starts, the same on every rank. This module is the choice, in numbers; zerokit.train.sizing.micro_probe its
torch side (the probe, the ranks' agreement, the TrainingArguments it changes).

- The bound: the memory estimate (zerokit.train.sizing.memory_need: the model states the engine still adds, the
  activations one sample keeps) against what the rank has: its GPU's free memory, or on CPU ranks its share of the
  node's host memory, less memory_need.CLOSE's margin.
- The candidates: powers of two up to that bound, at most MAX_MICRO and no more than the rank's share of the
  training blocks; where the global batch is fixed (a DeepSpeed config's numeric train_batch_size, a resumed
  checkpoint's recorded batch: zerokit.train.sizing.global_batch), the divisors of its share per data-parallel rank, and
  the gradient accumulation set to keep it.
- On a GPU, one real forward and backward at the largest candidate, beside a ballast the size of the states still to
  come; a probe that raises torch.cuda.OutOfMemoryError, or peaks above HEADROOM of the GPU's memory, halves it
  (`halving`). On CPU ranks no probe: host memory that runs out brings the kernel's OOM killer, not an exception
  that could be caught, so the estimate alone chooses (it is 1.1 to 1.8 times the measured figure, never below).
- The ranks agree on the smallest choice (all_reduce MIN): each probes its own GPU, so a GPU shared with another
  process, or a smaller one, holds every rank to what it fits; a probe per rank costs no more wall time than one on
  rank 0 of each node, and no rank has to assume that its GPU is like another's.

Refused before torch (check_options), in one line naming the fix: a micro-batch given too
(--per_device_train_batch_size), HF's --auto_find_batch_size, --tp-size/--pp-size and ZeRO-3 (the probe runs the
model whole on one rank), and a DeepSpeed config whose train_micro_batch_size_per_gpu is a number (the Trainer fills
it from the chosen micro-batch only where it is "auto").
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from zerokit.foundations.errors import UserError
from zerokit.train.ds_settings import AUTO
from zerokit.train.options import MICRO_BATCH_AUTO, TrainFlags, given_fields

MAX_MICRO = 1024  # the largest micro-batch tried
HEADROOM = 0.9  # a probe's peak (ballast included) must stay within this share of the GPU's memory


def check_options(options: TrainFlags, training_flags: Sequence[str]) -> None:
    """--micro-batch auto can choose for this run, or one line naming what keeps it from doing so (before torch)."""
    if options.micro_batch != MICRO_BATCH_AUTO:
        return
    given = given_fields(training_flags)
    if "per_device_train_batch_size" in given:
        raise UserError("--micro-batch auto chooses --per_device_train_batch_size: give one of them, not both")
    if "auto_find_batch_size" in given:
        raise UserError(
            "--micro-batch auto and HF's --auto_find_batch_size both choose the micro-batch (HF's by halving after "
            "an out-of-memory error mid-run): give one of them"
        )
    if options.tp_size > 1 or options.pp_size is not None:
        raise UserError(
            "--micro-batch auto probes the whole model on each rank: leave out --tp-size/--pp-size, or give "
            "--per_device_train_batch_size N"
        )
    settings = options.ds_settings
    if settings is None:
        return
    if settings.zero_stage == 3:
        raise UserError(
            f"--micro-batch auto probes the whole model on each rank, and --config {options.config} is ZeRO-3, "
            "which partitions it: use a ZeRO-1/2 config (zero1, zero2), or give --per_device_train_batch_size N"
        )
    micro = settings.train_micro_batch_size_per_gpu
    if micro != AUTO:
        raise UserError(
            f"--micro-batch auto chooses the micro-batch, and {settings.path} fixes train_micro_batch_size_per_gpu "
            f'at {micro}: set it to "auto" there, or leave out --micro-batch auto'
        )
    fixed = settings.fixed_global_batch
    if fixed is not None and "gradient_accumulation_steps" in given:
        raise UserError(
            f"{settings.path} fixes train_batch_size at {fixed}, and --micro-batch auto sets the gradient "
            "accumulation that keeps it: leave out --gradient_accumulation_steps"
        )
    if fixed is not None and settings.gradient_accumulation_steps != AUTO:
        raise UserError(
            f"{settings.path} fixes both train_batch_size and gradient_accumulation_steps, which leaves "
            'no micro-batch to choose: set one of them to "auto", or leave out --micro-batch auto'
        )


def candidates(bound: int, cap: int, share: int | None) -> list[int]:
    """The micro-batches to try, largest first: at most bound, cap and MAX_MICRO (and at least 1, which a probe
    decides); powers of two, or where share (a fixed global batch per data-parallel rank) is given its divisors."""
    top = max(min(bound, cap, MAX_MICRO), 1)
    if share is not None:
        return [size for size in range(min(top, share), 0, -1) if share % size == 0]
    return [2**power for power in range(top.bit_length() - 1, -1, -1)]


@dataclass(frozen=True)
class Choice:
    """The micro-batch chosen (None: not even the smallest candidate fits) and the larger ones that did not."""

    micro: int | None
    too_big: tuple[int, ...] = ()


def halving(sizes: Sequence[int], fits: Callable[[int], bool]) -> Choice:
    """From the largest of sizes (largest first), each try halving the last: the first that fits."""
    too_big: list[int] = []
    size: int | None = sizes[0] if sizes else None
    while size is not None:
        if fits(size):
            return Choice(size, tuple(too_big))
        too_big.append(size)
        size = next((smaller for smaller in sizes if smaller <= size // 2), None)
    return Choice(None, tuple(too_big))


def accumulation_for(global_batch: int, micro: int, data_parallel: int) -> int:
    """The gradient accumulation that makes global_batch from micro on data_parallel ranks (micro divides its share)."""
    return global_batch // (micro * data_parallel)


def share_of(global_batch: int, data_parallel: int, source: str) -> int:
    """A fixed global batch's share per data-parallel rank; one line where the ranks cannot split it evenly."""
    if global_batch % data_parallel:
        raise UserError(
            f"{source} fixes the global batch at {global_batch}, which {data_parallel} data-parallel ranks cannot "
            f"share evenly: run on a number of ranks that divides {global_batch}, or give "
            "--per_device_train_batch_size and --gradient_accumulation_steps"
        )
    return global_batch // data_parallel
