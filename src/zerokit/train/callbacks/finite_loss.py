"""A diverged run stops before it saves.

Each step's loss is checked for NaN/inf on its device (no host sync per step); the ranks agree on the flag
only at steps that log or save, so a diverged model is never written and the last good checkpoint stays the
newest. A logged gradient norm that is NaN/inf stops it too (but under fp16, where it means a skipped step).
"""

from __future__ import annotations

import math
from pathlib import Path

import torch
from transformers import TrainerCallback

from zerokit.foundations.errors import RunFailure
from zerokit.outputs.checkpoints import newest_complete_checkpoint
from zerokit.train.callbacks.preemption import any_rank


class TrainingDiverged(RunFailure):
    """Every rank raises it at the same step; rank 0 says it."""

    every_rank = True


class FiniteLossGuard(TrainerCallback):
    """Stops training, before anything is saved, once a step's loss was NaN or inf on any rank."""

    def __init__(self) -> None:
        self._bad: torch.Tensor | None = None  # on the loss's device: set by any non-finite loss

    def observe(self, loss: torch.Tensor) -> None:
        bad = ~torch.isfinite(loss.detach()).all()
        self._bad = bad if self._bad is None else self._bad | bad

    def on_step_end(self, args, state, control, **kwargs):
        at_boundary = control.should_log or control.should_save or control.should_training_stop
        if at_boundary or state.global_step >= state.max_steps:
            self.check(state.global_step, args.output_dir)
        return control

    def on_log(self, args, state, control, logs=None, **kwargs):
        """The global gradient norm is the same on every rank; under fp16 an inf one is a skipped step."""
        norm = (logs or {}).get("grad_norm")
        if norm is not None and not math.isfinite(norm) and not args.fp16:
            raise diverged("the gradient norm", state.global_step, args.output_dir)
        return control

    def check(self, step: int, output_dir: str) -> None:
        if self._bad is not None and any_rank(self._bad):
            raise diverged("the loss", step, output_dir)


def diverged(what: str, step: int, output_dir: str) -> TrainingDiverged:
    last = newest_complete_checkpoint(Path(output_dir))
    keep = f"the last good checkpoint is {last}: " if last else "no checkpoint was written: "
    return TrainingDiverged(
        f"training diverged: {what} became NaN or inf by step {step}, so nothing was saved; {keep}"
        "lower --learning_rate or lengthen --warmup_steps (or use --bf16 instead of --fp16), then "
        + ("--resume auto" if last else "train again")
    )
