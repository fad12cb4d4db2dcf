"""StepClock: the measuring instrument inside a training run, the same for zerokit's train and the plain script.

Each rank writes `rank-<R>.json` into a folder when training ends: when its first step ended
(wall clock, so `bench` can subtract the moment it started the job), how long each step took and how
many tokens it trained on, the eval losses seen, and its peak memory. A step's time runs from the end of
the previous step (or of the evaluation or checkpoint after it) to its own end, so data loading counts and
evaluations and saves do not: a checkpoint's seconds are kept apart (`save_seconds`: from the step's end to the
save's, what a checkpoint costs the run; with `saves`, the run's zerokit.train.checkpoints.writer.SaveLog, each
save's figures too, in `checkpoint_saves`: the wait for the one before it, a background write's time and size).

The clock must not slow what it measures. On a GPU a moment is a CUDA event recorded on the current stream
(Timeline): the host never waits for the device at a step's end, so the host work between steps (collate,
logging) still overlaps the kernels queued before it, as in an untimed run. A step's time is the device
timeline's distance between two step ends, which includes any time the device sat idle waiting for the host:
in a steady run, the wall time per step. Finished events are read as they complete (`query()`, which never
blocks); the device is waited for twice only: after the first step (the wall-clock time to first step) and
when training ends. (Before, each step end called `torch.cuda.synchronize()`, which turned the host's work
between steps into device idle time: the measurement cost what it measured.)

A step's tokens are what the Trainer counted in its batches when the run asks it to
(`--include_num_input_tokens_seen`: a gather and a device sync per batch); else none are recorded and a
step is counted as full (bench leaves the count off on a GPU, where its presets give every step full batches).
The file also holds the start-up marks (zerokit.foundations.startup_marks): when the process started, the
phases it (and `launch` before it) recorded, and `train_begin`, when the Trainer had built the
DeepSpeed engine and was about to take the first step.
"""

from __future__ import annotations

import os
import resource
import socket
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from transformers import TrainerCallback

from zerokit.foundations import startup_marks
from zerokit.foundations.files import write_json

if TYPE_CHECKING:
    from zerokit.train.checkpoints.writer import SaveLog


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


class Timeline:
    """Moments on the device's timeline: on a GPU a CUDA event recorded on the current stream (the host does not
    wait), else the host's clock. `seconds(a, b)` is exact once `b` has `happened` (which never blocks)."""

    def __init__(self) -> None:
        import torch

        self.cuda = torch.cuda.is_available() and torch.cuda.is_initialized()

    def now(self) -> Any:
        if not self.cuda:
            return time.time()
        import torch

        event = torch.cuda.Event(enable_timing=True)
        event.record()
        return event

    def happened(self, moment: Any) -> bool:
        return moment.query() if self.cuda else True

    def seconds(self, start: Any, end: Any) -> float:
        return start.elapsed_time(end) / 1000 if self.cuda else end - start


def model_shape(config) -> dict[str, int]:
    """Layers and hidden size from an HF config (GPT-2's n_layer/n_embd map to these names); {} when absent."""
    layers, hidden = getattr(config, "num_hidden_layers", None), getattr(config, "hidden_size", None)
    return {"layers": int(layers), "hidden": int(hidden)} if layers and hidden else {}


class StepClock(TrainerCallback):
    """model_parallel: the ranks of one data-parallel replica (a tensor-parallel group, or a pipeline's stages).
    They share a batch (samples per step count the replicas) and each holds a part of the weights, so the
    caller gives the whole model's parameter count, taken before the split."""

    def __init__(
        self,
        folder: str | Path,
        tokens_per_sample: int,
        model_parallel: int = 1,
        parameters: int | None = None,
        saves: SaveLog | None = None,
    ):
        self.folder = Path(folder)
        self.saves = saves
        self.tokens_per_sample = tokens_per_sample
        self.model_parallel = model_parallel
        self.timeline: Timeline | None = None  # made at the first step, once the device is in use
        self.mark: Any = None  # the moment the next step's (or save's) time starts from
        self.pending: list[tuple[str, Any, Any, int | None]] = []  # (step|save, start, end, tokens): not yet read
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
        seen = getattr(state, "num_input_tokens_seen", 0) or 0
        if self.timeline is None:  # the first step: its wall-clock end, for the time to first step
            synchronize()
            self.first_step_end = time.time()
            self.timeline = Timeline()
            self.mark = self.timeline.now()
        else:
            now = self.timeline.now()
            # The Trainer counts every rank's batch: the ranks of a replica share one.
            tokens = (seen - self.tokens_seen) // self.model_parallel if seen else None
            self.pending.append(("step", self.mark, now, tokens))
            self.mark = now
            self.read_finished()
        self.tokens_seen = seen

    def on_evaluate(self, args, state, control, metrics=None, **kwargs):
        if metrics and "eval_loss" in metrics:
            self.evals.append((state.global_step, float(metrics["eval_loss"])))
        if self.timeline is not None:
            self.mark = self.timeline.now()  # the next step's time starts after the evaluation
        if self.record:  # an evaluation after training (train's final one): written again
            self.write(args)

    def on_save(self, args, state, control, **kwargs):
        if self.timeline is None:
            return
        now = self.timeline.now()
        self.pending.append(("save", self.mark, now, None))
        self.mark = now  # the next step's time starts after the save

    def read_finished(self, wait: bool = False) -> None:
        """Move the pending spans whose end has happened (all of them with `wait`) into the figures, in order."""
        timeline = self.timeline
        if timeline is None:  # no step yet: nothing pending
            return
        if wait and self.pending:
            synchronize()
        while self.pending and (wait or timeline.happened(self.pending[0][2])):
            kind, start, end, tokens = self.pending.pop(0)
            seconds = timeline.seconds(start, end)
            if kind == "save":
                self.save_seconds.append(seconds)
                continue
            self.step_seconds.append(seconds)
            if tokens is not None:
                self.step_tokens.append(tokens)

    def on_train_end(self, args, state, control, **kwargs):
        self.read_finished(wait=True)
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
            "checkpoint_saves": [s.as_record() for s in self.saves.saves] if self.saves else [],
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
        """The rank's file. Where it cannot be written, one line says so and training's end goes on: the model is
        saved after this callback, and a run is worth more than its timings (train checks --timings-dir first)."""
        path = self.folder / f"rank-{args.process_index}.json"
        try:
            self.folder.mkdir(parents=True, exist_ok=True)
            write_json(path, {**self.record, "evals": self.evals}, indent=None)
        except OSError as error:
            print(f"zerokit: the step times were not written to {path}: {error}", file=sys.stderr, flush=True)
