"""Checkpoints written in the background (`train --checkpoint-write background`), published only when whole.

The Trainer's save (zerokit.train.engines.hf_trainer) copies the large files' state into host buffers
(zerokit.train.checkpoints.capture) and writes the small ones into `tmp-checkpoint-N/checkpoint-N` as before, then
hands the copies to BackgroundWriter and returns to training. One thread per save, on every rank:

1. writes this rank's files into the staging folder, each whole (zerokit.train.checkpoints.files: a partial name,
   fsync, rename);
2. waits until the save's callbacks have run (`release`: the run record goes into the staging folder first);
3. agrees with the other ranks' writers that every rank's files are on disk (one all-reduce on a gloo group of
   its own, never the training's);
4. on the saving rank, publishes: flushes the folder to disk, records every file's size, renames it to
   `checkpoint-N` and rotates (zerokit.outputs.checkpoints.publish, rotate), as a synchronous save does.

Until step 4 the checkpoint is a `tmp-` folder that `--resume auto` never takes: a crash or SIGKILL during the
write leaves the previous whole checkpoint the newest. One save at a time: a save that comes while the last one
still writes first waits for it (the seconds are reported), and so does the end of training, a preemption's
included, so a run exits only with its checkpoints on disk. A write that failed is raised at that wait.

SaveLog keeps what each save cost (the stall it put on training, the wait, the background write's time and
size); the run record and bench's step clock read it.
"""

from __future__ import annotations

import statistics
import threading
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any

from zerokit.foundations.errors import RunFailure
from zerokit.train.checkpoints.files import PendingFile, lower_priority

MODES = ("background", "sync")


@dataclass
class SaveFigures:
    """What one checkpoint cost, on this rank (the saving rank's figures are the run's)."""

    step: int
    write: str  # "background", "sync" or "memory" (--memory-checkpoints)
    stall_seconds: float  # training held: the whole save (sync), or the wait, the host copy and the small files
    wait_seconds: float = 0.0  # of the stall: waiting for the save before it to finish writing
    copy_bytes: int = 0  # copied into host buffers (background)
    write_seconds: float | None = None  # from the save's start to the checkpoint published (None: not yet)
    bytes: int | None = None  # the published checkpoint's size, every rank's files (a memory copy: its node's)
    peer_seconds: float | None = None  # a memory copy: swapping it with the neighbour nodes (node_copies.ring)
    peer_bytes: int | None = None  # a memory copy: the neighbour's copy received

    @property
    def mib_per_s(self) -> float | None:
        if not self.bytes or not self.write_seconds:
            return None
        return self.bytes / 2**20 / self.write_seconds

    def as_record(self) -> dict[str, Any]:
        return {**asdict(self), "mib_per_s": self.mib_per_s}


@dataclass
class SaveLog:
    """Every save of a run, in order; filled by the Trainer and its writer, read by the callbacks."""

    write: str = "sync"
    saves: list[SaveFigures] = field(default_factory=list)

    def summary(self, step_seconds: float | None = None) -> dict[str, Any]:
        """The run record's `checkpoint_saves`: each save, and its stall in steps of step_seconds (the median)."""
        saves = []
        for save in self.saves:
            record = save.as_record()
            if step_seconds:
                record["stall_steps"] = save.stall_seconds / step_seconds
            saves.append(record)
        stalls = [s.stall_seconds for s in self.saves if s.write != "memory"]
        copies = [s.stall_seconds for s in self.saves if s.write == "memory"]
        return {
            "write": self.write,
            "median_step_seconds": step_seconds,
            "median_stall_seconds": statistics.median(stalls) if stalls else None,  # the disk's checkpoints
            "median_memory_stall_seconds": statistics.median(copies) if copies else None,  # --memory-checkpoints
            "saves": saves,
        }


class WriteFailed(RunFailure):
    """Another rank's writer failed: this checkpoint was not published (that rank names its own error)."""


@dataclass
class Job:
    files: list[PendingFile]
    figures: SaveFigures
    started: float  # time.monotonic() when the save began
    publish: Callable[[SaveFigures], int] | None  # the saving rank's: publish the staging folder, its size in bytes
    name: str
    released: threading.Event = field(default_factory=threading.Event)
    error: BaseException | None = None
    thread: threading.Thread | None = None


class BackgroundWriter:
    """One rank's writer of background checkpoints (see the module docstring). Every rank makes one, at the same
    point, when the process group is up: its gloo group is made then, by all of them."""

    def __init__(self) -> None:
        self.group = agreement_group()
        self.job: Job | None = None

    def wait(self) -> float:
        """Wait for the last save to be written and published; the seconds waited. Raises what failed in it."""
        job, started = self.job, time.monotonic()
        if job is None:
            return 0.0
        job.released.set()
        assert job.thread is not None
        job.thread.join()
        self.job = None
        if job.error is not None:
            raise job.error
        return time.monotonic() - started

    @property
    def pending(self) -> str | None:
        """The checkpoint being written ("checkpoint-N"), if any."""
        return self.job.name if self.job else None

    @property
    def pending_write(self) -> str | None:
        """How the checkpoint being written is written ("background" or "memory"), if any."""
        return self.job.figures.write if self.job else None

    def submit(self, job: Job) -> None:
        """Start writing job's files (the last save has been waited for)."""
        assert self.job is None, "one save at a time: wait() first"
        self.job = job
        job.thread = threading.Thread(target=self._run, args=(job,), name=f"zerokit-writer-{job.name}", daemon=True)
        job.thread.start()

    def release(self) -> None:
        """The save's callbacks have run: its checkpoint may be published once written."""
        if self.job is not None:
            self.job.released.set()

    def _run(self, job: Job) -> None:
        lower_priority()
        ok = True
        try:
            for file in job.files:
                file.write()
            job.files = []  # the host copies stay in the snapshot's buffers for the next save
        except BaseException as error:  # raised in the training thread at the next wait
            job.error, ok = error, False
        job.released.wait()
        try:
            everyone = agree(self.group, ok)
            if ok and not everyone:
                job.error = WriteFailed(
                    f"{job.name} was not published: another rank could not write its files (its error is above); "
                    "the last whole checkpoint is intact: --resume auto"
                )
            if everyone and job.publish is not None:
                job.figures.bytes = job.publish(job.figures)
            job.figures.write_seconds = time.monotonic() - job.started
        except BaseException as error:
            job.error = job.error or error


def agreement_group() -> Any:
    """A gloo group of its own for the writers' agreement (None: one rank, nothing to agree)."""
    import torch.distributed as dist

    if not (dist.is_available() and dist.is_initialized()) or dist.get_world_size() == 1:
        return None
    return dist.new_group(backend="gloo")


def agree(group: Any, ok: bool) -> bool:
    """Whether every rank's writer wrote its files (a MIN all-reduce on the writers' own group)."""
    if group is None:
        return ok
    import torch
    import torch.distributed as dist

    flag = torch.tensor([int(ok)], dtype=torch.int32)
    dist.all_reduce(flag, op=dist.ReduceOp.MIN, group=group)
    return bool(flag.item())
