"""StepClock: the measuring instrument inside a training run, the same for zerokit's train and the plain script.

Each rank writes `rank-<R>.json` into a folder when training ends: when its first step ended
(wall clock, so `bench` can subtract the moment it started the job), how long each step took,
the eval losses seen, and its peak memory. A step's time runs from the end of the previous step
(or of the evaluation after it) to its own end, so data loading counts and evaluation does not.
The file also holds the start-up marks (zerokit.foundations.startup_marks): when the process started, the
phases it (and `launch` before it) recorded, and `train_begin`, when the Trainer had built the
DeepSpeed engine and was about to take the first step.
"""

from __future__ import annotations

import os
import resource
import socket
import time
from pathlib import Path

from transformers import TrainerCallback

from zerokit.foundations import startup_marks
from zerokit.foundations.files import write_json


def peak_memory() -> tuple[int, str]:
    """(bytes, what was measured): allocated GPU memory on a GPU, else the process's peak RSS."""
    import torch

    if torch.cuda.is_available() and torch.cuda.is_initialized():
        return torch.cuda.max_memory_allocated(), "gpu-allocated"
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024, "cpu-rss"


class StepClock(TrainerCallback):
    """model_parallel: the ranks of one data-parallel replica (a tensor-parallel group, or a pipeline's stages).
    They share a batch (samples per step count the replicas) and each holds a part of the weights, so the
    caller gives the whole model's parameter count, taken before the split."""

    def __init__(
        self, folder: str | Path, tokens_per_sample: int, model_parallel: int = 1, parameters: int | None = None
    ):
        self.folder = Path(folder)
        self.tokens_per_sample = tokens_per_sample
        self.model_parallel = model_parallel
        self.mark = time.time()
        self.first_step_end: float | None = None
        self.step_seconds: list[float] = []
        self.evals: list[tuple[int, float]] = []
        self.parameters: int | None = parameters  # the model's, for bench's FLOPs
        self.record: dict = {}  # filled when training ends

    def on_train_begin(self, args, state, control, model=None, **kwargs):
        startup_marks.mark("train_begin")
        # Under ZeRO-3 a parameter holds a partition; ds_numel is its whole size.
        if model is not None and self.parameters is None:
            self.parameters = sum(getattr(p, "ds_numel", p.numel()) for p in model.parameters())

    def on_step_end(self, args, state, control, **kwargs):
        now = time.time()
        if self.first_step_end is None:
            self.first_step_end = now
        else:
            self.step_seconds.append(now - self.mark)
        self.mark = now

    def on_evaluate(self, args, state, control, metrics=None, **kwargs):
        if metrics and "eval_loss" in metrics:
            self.evals.append((state.global_step, float(metrics["eval_loss"])))
        self.mark = time.time()  # the next step's time starts after the evaluation
        if self.record:  # an evaluation after training (train's final one): written again
            self.write(args)

    def on_train_end(self, args, state, control, **kwargs):
        memory, kind = peak_memory()
        data_parallel = args.world_size // self.model_parallel
        samples_per_step = args.per_device_train_batch_size * args.gradient_accumulation_steps * data_parallel
        self.record = {
            "rank": args.process_index,
            "world_size": args.world_size,
            "host": socket.gethostname(),
            "first_step_end": self.first_step_end,
            "step_seconds": self.step_seconds,  # every step after the first
            "samples_per_step": samples_per_step,
            "tokens_per_step": samples_per_step * self.tokens_per_sample,
            "peak_memory_bytes": memory,
            "memory_kind": kind,
            "parameters": self.parameters,
            "startup": startup_marks.recorded("", os.environ),  # [(phase, when it ended)], oldest first
        }
        self.write(args)

    def write(self, args) -> None:
        self.folder.mkdir(parents=True, exist_ok=True)
        write_json(self.folder / f"rank-{args.process_index}.json", {**self.record, "evals": self.evals}, indent=None)
