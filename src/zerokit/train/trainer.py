"""The Trainer as `train` runs it: what it writes is whole or absent, and faults are named.

- Checkpoints appear complete or not at all: the Trainer writes `checkpoint-N` in place, so a
  crash mid-write would leave a half checkpoint that looks like the newest. Here it is written
  into `tmp-checkpoint-N/` and moved to `checkpoint-N` by the saving rank once every rank has
  finished; a `tmp-` folder is never picked for resuming.
- Rotation (`save_total_limit`) only ever removes this run's checkpoints (zerokit.outputs.checkpoints.rotate).
- A diverged run stops before it saves (zerokit.train.callbacks.finite_loss): the guard sees every
  step's loss and runs after every other callback.
- A full disk while saving is said as such, not as a serializer's "iostream error".
"""

from __future__ import annotations

import errno
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from transformers import Trainer

from zerokit.foundations.errors import RunFailure
from zerokit.outputs.checkpoints import PREFIX, STAGING_PREFIX, newest_complete_checkpoint, publish, rotate
from zerokit.outputs.ownership import existing_parent
from zerokit.train.callbacks.finite_loss import FiniteLossGuard

DISK_FULL_ERRNOS = (errno.ENOSPC, errno.EDQUOT)
# What torch's and DeepSpeed's writers say when a write fails (the errno is lost on the way).
WRITE_FAILED_WORDS = ("No space left", "file write failed", "iostream error", "Disk quota")


class DiskFull(RunFailure):
    pass


class ZerokitTrainer(Trainer):
    """A Trainer with the guarantees in the module docstring."""

    _staging: Path | None = None

    def __init__(self, *args, loss_guard: FiniteLossGuard, **kwargs) -> None:
        # Last, so that it sees every callback's wish to save (a preemption's too) before a save.
        super().__init__(*args, callbacks=[*kwargs.pop("callbacks", []), loss_guard], **kwargs)
        self.loss_guard = loss_guard

    def training_step(self, *args, **kwargs):
        loss = super().training_step(*args, **kwargs)
        self.loss_guard.observe(loss)
        return loss

    def _get_output_dir(self, trial) -> str:
        return str(self._staging) if self._staging else super()._get_output_dir(trial)

    def save_model(self, output_dir: str | None = None, _internal_call: bool = False) -> None:
        with naming_a_full_disk(Path(output_dir or self.args.output_dir), "the model"):
            super().save_model(output_dir, _internal_call)

    def _save_checkpoint(self, model, trial) -> None:
        run_dir = Path(super()._get_output_dir(trial))
        name = f"{PREFIX}-{self.state.global_step}"
        staging = run_dir / f"{STAGING_PREFIX}{name}"
        if self.args.should_save and staging.exists():  # left by a run killed while saving
            shutil.rmtree(staging)
        self.accelerator.wait_for_everyone()
        self._staging = staging
        try:
            with naming_a_full_disk(run_dir, name):
                super()._save_checkpoint(model, trial)  # writes staging/checkpoint-N
        finally:
            self._staging = None
        self.accelerator.wait_for_everyone()  # every rank has written its shards
        if self.args.should_save:
            publish(staging / name, run_dir / name)
            shutil.rmtree(staging)
            best = self.state.best_model_checkpoint
            rotate(run_dir, self.args.save_total_limit, Path(best) if best else None)
        self.accelerator.wait_for_everyone()


@contextmanager
def naming_a_full_disk(folder: Path, what: str) -> Iterator[None]:
    """Turn a write that failed on a full disk into DiskFull: one line, the folder, the way on."""
    try:
        yield
    except RunFailure:
        raise
    except Exception as error:
        if not disk_full(error, folder):
            raise
        free = shutil.disk_usage(existing_parent(folder)).free
        last = newest_complete_checkpoint(folder)
        raise DiskFull(
            f"no space left on the file system of {folder} while writing {what} ({free / 2**20:.0f} MiB "
            "free): free space there or give another --output-dir, then --resume auto"
            + (f" (the last whole checkpoint, {last}, is intact)" if last else "")
        ) from None


def disk_full(error: BaseException, folder: Path) -> bool:
    """Whether error (or what caused it) is a write that failed for want of space."""
    seen: BaseException | None = error
    while seen is not None:
        if isinstance(seen, OSError) and seen.errno in DISK_FULL_ERRNOS:
            return True
        if any(word in str(seen) for word in WRITE_FAILED_WORDS):
            return shutil.disk_usage(existing_parent(folder)).free < 64 * 2**20
        seen = seen.__cause__ or seen.__context__
    return False
