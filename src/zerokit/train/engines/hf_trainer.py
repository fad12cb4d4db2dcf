"""The Trainer as `train` runs it: what it writes is whole or absent, and faults are named.

- Checkpoints appear complete or not at all: the Trainer writes `checkpoint-N` in place, so a
  crash mid-write would leave a half checkpoint that looks like the newest. Here it is written
  into `tmp-checkpoint-N/` and moved to `checkpoint-N` by the saving rank once every rank has
  finished; a `tmp-` folder is never picked for resuming.
- Rotation (`save_total_limit`) only ever removes this run's checkpoints (zerokit.outputs.checkpoints.rotate).
- A diverged run stops before it saves (zerokit.train.callbacks.finite_loss): the guard sees every
  step's loss and runs after every other callback.
- A full disk while saving is said as such, not as a serializer's "iostream error".
- `--checkpoint-write background`: the save copies the large files' state to host memory and returns; a writer
  thread writes them and publishes the folder once every rank's files are on disk
  (zerokit.train.checkpoints.writer). A save waits for the one before it; the end of training waits for the last.
- `--memory-checkpoints K`: at every K-th step end that saves nothing to disk, the same background save into the
  node's memory, swapped with the neighbour nodes (zerokit.train.checkpoints.node_copies.saver).
"""

from __future__ import annotations

import errno
import shutil
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from transformers import Trainer

from zerokit.foundations.errors import RunFailure
from zerokit.outputs.checkpoints import PREFIX, STAGING_PREFIX, newest_complete_checkpoint, publish, rotate
from zerokit.outputs.ownership import existing_parent
from zerokit.train.callbacks.finite_loss import FiniteLossGuard
from zerokit.train.checkpoints.node_copies.saver import MemoryCheckpoints, MemoryPlan, naming_a_failed_copy
from zerokit.train.checkpoints.writer import BackgroundWriter, Job, SaveFigures, SaveLog

DISK_FULL_ERRNOS = (errno.ENOSPC, errno.EDQUOT)
# What torch's and DeepSpeed's writers say when a write fails (the errno is lost on the way).
WRITE_FAILED_WORDS = ("No space left", "file write failed", "iostream error", "Disk quota")


class DiskFull(RunFailure):
    pass


class ZerokitTrainer(Trainer):
    """A Trainer with the guarantees in the module docstring."""

    _staging: Path | None = None

    def __init__(
        self,
        *args,
        loss_guard: FiniteLossGuard,
        saves: SaveLog | None = None,
        memory: MemoryPlan | None = None,
        **kwargs,
    ) -> None:
        # Last, so that it sees every callback's wish to save (a preemption's too) before a save.
        super().__init__(*args, callbacks=[*kwargs.pop("callbacks", []), loss_guard], **kwargs)
        self.loss_guard = loss_guard
        self.saves = saves if saves is not None else SaveLog()
        self.writer: BackgroundWriter | None = None
        self.memory: MemoryCheckpoints | None = None
        self._saved_step = -1  # the step of the last save, to disk or to memory
        if self.saves.write == "background":
            from zerokit.train.checkpoints.host_snapshot import HostSnapshot

            self.writer = BackgroundWriter()  # every rank, here: it makes the writers' process group
            self.snapshot = HostSnapshot()
            if memory is not None:
                self.memory = MemoryCheckpoints(memory)  # every rank, here: it makes the ring's group

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
        started = time.monotonic()
        self._saved_step = self.state.global_step
        run_dir = Path(super()._get_output_dir(trial))
        waited = self.wait_for_writes()  # one save at a time
        name = f"{PREFIX}-{self.state.global_step}"
        staging = run_dir / f"{STAGING_PREFIX}{name}"
        if self.args.should_save and staging.exists():  # left by a run killed while saving
            shutil.rmtree(staging)
        self.accelerator.wait_for_everyone()
        self._staging = staging
        try:
            with naming_a_full_disk(run_dir, name):
                if self.writer is None:
                    super()._save_checkpoint(model, trial)  # writes staging/checkpoint-N
                else:
                    limit, best = self.args.save_total_limit, self.best()
                    publish = lambda _: publish_checkpoint(staging, name, run_dir, limit, best)  # noqa: E731
                    self._copy_checkpoint(model, trial, staging, started, waited, "background", publish)
                    return
        finally:
            self._staging = None
        self.accelerator.wait_for_everyone()  # every rank has written its shards
        figures = SaveFigures(self.state.global_step, "sync", 0.0)
        if self.args.should_save:
            figures.bytes = publish_checkpoint(staging, name, run_dir, self.args.save_total_limit, self.best())
        self.accelerator.wait_for_everyone()
        figures.stall_seconds = figures.write_seconds = time.monotonic() - started
        self.saves.saves.append(figures)

    def _copy_checkpoint(
        self,
        model,
        trial,
        staging: Path,
        started: float,
        waited: float,
        write: str,
        publish: Callable[[SaveFigures], int],
    ) -> Job:
        """A save in the background: the Trainer's save into staging with its large files copied to host memory,
        then handed to the writer, which calls publish (on the saving rank: a disk checkpoint's; on a node's first
        rank: a memory copy's) once every rank has written its files."""
        from zerokit.train.checkpoints.capture import Capture, capturing

        assert self.writer is not None
        self.snapshot.begin()
        capture = Capture(self.snapshot)
        engine = self.model_wrapped if self.is_deepspeed_enabled else None
        self._staging = staging
        try:
            with capturing(engine, capture):
                super()._save_checkpoint(model, trial)  # the small files into staging/checkpoint-N, the large copied
        finally:
            self._staging = None
        self.snapshot.finish()
        saving = self.memory.first if write == "memory" and self.memory else self.args.should_save
        figures = SaveFigures(self.state.global_step, write, 0.0, waited, self.snapshot.bytes)
        job = Job(capture.files, figures, started, publish if saving else None, f"{PREFIX}-{self.state.global_step}")
        self.writer.submit(job)
        figures.stall_seconds = time.monotonic() - started
        self.saves.saves.append(figures)
        return job

    def _memory_checkpoint(self, model, trial) -> None:
        """A checkpoint into the nodes' memory (zerokit.train.checkpoints.node_copies.saver), written and swapped in the
        background; no callback runs for it."""
        assert self.memory is not None
        started = time.monotonic()
        waited = self.wait_for_writes()  # one save at a time
        step = self._saved_step = self.state.global_step  # the epoch's end calls again at the same step
        staging = self.memory.staging(step)
        (staging / f"{PREFIX}-{step}").mkdir(parents=True, exist_ok=True)  # every node's: DeepSpeed makes rank 0's
        written, memory = staging / f"{PREFIX}-{step}", self.memory
        job = self._copy_checkpoint(
            model, trial, staging, started, waited, "memory", lambda figures: memory.publish(written, step, figures)
        )
        job.released.set()

    def best(self) -> Path | None:
        best = self.state.best_model_checkpoint
        return Path(best) if best else None

    def wait_for_writes(self) -> float:
        """Wait for the checkpoint being written in the background (none: 0); a failed write raised, named."""
        if self.writer is None or (pending := self.writer.pending) is None:
            return 0.0
        if self.writer.pending_write == "memory" and self.memory is not None:
            with naming_a_failed_copy(self.memory.store.folder, pending):
                return self.writer.wait()
        with naming_a_full_disk(Path(self.args.output_dir), pending):
            return self.writer.wait()

    def _maybe_log_save_evaluate(self, tr_loss, grad_norm, model, trial, *args, **kwargs) -> None:
        super()._maybe_log_save_evaluate(tr_loss, grad_norm, model, trial, *args, **kwargs)
        if self.writer is not None:
            self.writer.release()  # the save's callbacks have written into its staging folder: it may publish
        step = self.state.global_step
        if self.memory is not None and self._saved_step != step and self.memory.due(step, self.state.max_steps):
            self._memory_checkpoint(model, trial)

    def _finalize_training(self, *args, **kwargs):
        self.wait_for_writes()  # the last checkpoint on disk before the best model is loaded and the run ends
        if self.memory is not None:
            self.memory.discard()
        return super()._finalize_training(*args, **kwargs)


def publish_checkpoint(staging: Path, name: str, run_dir: Path, limit: int | None, best: Path | None) -> int:
    """The saving rank's last step of a save: staging/name (every rank's files on disk) becomes run_dir/name, the
    oldest checkpoints beyond the limit removed; the checkpoint's size in bytes."""
    from zerokit.train.checkpoints.files import fsync_path, fsync_tree

    fsync_tree(staging / name)
    publish(staging / name, run_dir / name)
    shutil.rmtree(staging)
    fsync_path(run_dir)
    rotate(run_dir, limit, best)
    return sum(p.stat().st_size for p in (run_dir / name).rglob("*") if p.is_file())


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
