"""StepClock: the measuring instrument inside a training run, the same for zerokit's train and the plain script.

Each rank writes `rank-<R>.json` into a folder when training ends: when its first step ended
(wall clock, so `bench` can subtract the moment it started the job), how long each step took and how
many tokens it trained on, the eval losses seen, and its peak memory. A step's time runs from the end of
the previous step (or of the evaluation or checkpoint after it) to its own end, so data loading counts and
evaluations and saves do not: a checkpoint's seconds are kept apart (`save_seconds`: from the step's end to the
save's, what a checkpoint costs the run). On a GPU each time stamp waits for the device
(`torch.cuda.synchronize`), so a step's time is its kernels' and not only their launch. A step's tokens are
what the Trainer counted in its batches (`--include_num_input_tokens_seen`, which bench turns on for every
script it times): the last step of an epoch is often short, and crediting it with a full batch overstates
throughput.
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


def synchronize() -> None:
    """Wait for the GPU's queued work, so a time stamp measures it (nothing to wait for on CPU)."""
    import torch

    if torch.cuda.is_available() and torch.cuda.is_initialized():
        torch.cuda.synchronize()


def model_shape(config) -> dict[str, int]:
    """Layers and hidden size from an HF config (GPT-2's n_layer/n_embd map to these names); {} when absent."""
    layers, hidden = getattr(config, "num_hidden_layers", None), getattr(config, "hidden_size", None)
    return {"layers": int(layers), "hidden": int(hidden)} if layers and hidden else {}


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
        self.save_seconds: list[float] = []
        self.evals: list[tuple[int, float]] = []
        self.parameters: int | None = parameters  # the model's, for bench's FLOPs
        self.shape: dict[str, int] = {}  # layers and hidden size, for attention's FLOPs
        self.step_tokens: list[int] = []  # tokens each timed step trained on, all replicas (none: not counted)
        self.tokens_seen = 0
        self.record: dict = {}  # filled when training ends

    def on_train_begin(self, args, state, control, model=None, **kwargs):
        startup_marks.mark("train_begin")
        # Under ZeRO-3 a parameter holds a partition; ds_numel is its whole size.
        if model is not None and self.parameters is None:
            self.parameters = sum(getattr(p, "ds_numel", p.numel()) for p in model.parameters())
        config = getattr(model, "config", None)
        if config is not None and not self.shape:
            self.shape = model_shape(config)
        self.tokens_seen = getattr(state, "num_input_tokens_seen", 0) or 0

    def on_step_end(self, args, state, control, **kwargs):
        synchronize()
        now = time.time()
        seen = getattr(state, "num_input_tokens_seen", 0) or 0
        if self.first_step_end is None:
            self.first_step_end = now
        else:
            self.step_seconds.append(now - self.mark)
            if seen:  # the Trainer counts every rank's batch: the ranks of a replica share one
                self.step_tokens.append((seen - self.tokens_seen) // self.model_parallel)
        self.tokens_seen = seen
        self.mark = now

    def on_evaluate(self, args, state, control, metrics=None, **kwargs):
        if metrics and "eval_loss" in metrics:
            self.evals.append((state.global_step, float(metrics["eval_loss"])))
        self.mark = time.time()  # the next step's time starts after the evaluation
        if self.record:  # an evaluation after training (train's final one): written again
            self.write(args)

    def on_save(self, args, state, control, **kwargs):
        synchronize()
        now = time.time()
        self.save_seconds.append(now - self.mark)
        self.mark = now  # the next step's time starts after the save

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
            "save_seconds": self.save_seconds,  # every checkpoint written
            "step_tokens": self.step_tokens if len(self.step_tokens) == len(self.step_seconds) else [],
            "samples_per_step": samples_per_step,
            "tokens_per_sample": self.tokens_per_sample,
            "tokens_per_step": samples_per_step * self.tokens_per_sample,  # a full step's
            "peak_memory_bytes": memory,
            "memory_kind": kind,
            "parameters": self.parameters,
            **self.shape,
            "startup": startup_marks.recorded("", os.environ),  # [(phase, when it ended)], oldest first
        }
        self.write(args)

    def write(self, args) -> None:
        self.folder.mkdir(parents=True, exist_ok=True)
        write_json(self.folder / f"rank-{args.process_index}.json", {**self.record, "evals": self.evals}, indent=None)
