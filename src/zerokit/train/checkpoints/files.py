"""One file of a background checkpoint, written whole: to a partial name beside it, flushed to disk, renamed.

The writer thread (zerokit.train.checkpoints.writer) writes the host copies the save made
(zerokit.train.checkpoints.host_snapshot): a torch.save state (DeepSpeed's module and optimizer states) or a safetensors
dict (HF's `model.safetensors`). Both serializers release the GIL while they copy bytes out (measured: the training
thread went on, its longest pause 18 to 70 ms while 800 MB were written), so the step that runs meanwhile is not held.

What the writer costs the training it runs beside (on CPU ranks it shares the cores) is kept low: torch files are
written without the zip records' CRC-32 (torch.utils.serialization.config.save.compute_crc32), which cost 2.3 s of
CPU per GB on the development VM against 0.4 s for the rest of the write, and which torch.load never checks (a
flipped byte in a CRC'd file loads silently); zerokit's damage check is each file's recorded size. The writer
thread also runs at a lower priority (nice WRITER_NICENESS), so the training's threads come first.

PAUSE_VARIABLE, for the fault tests only: seconds to sleep after each PACE_BYTES of a torch file, so that a test
can kill the ranks while a file is half written (a tiny model's files are written in milliseconds).
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO

PARTIAL_SUFFIX = ".zerokit-partial"
PAUSE_VARIABLE = "ZEROKIT_TEST_CHECKPOINT_WRITE_PAUSE"
PACE_BYTES = 64 * 1024
WRITER_NICENESS = 10


@dataclass
class PendingFile:
    """A file the Trainer's save asked for, held in host memory until the writer writes it."""

    path: Path
    state: Any  # the host copy: a torch.save object, or {name: tensor} for safetensors
    kind: str  # "torch" or "safetensors"
    metadata: dict[str, str] | None = None  # safetensors' header metadata

    def write(self) -> int:
        """Write the file whole (see the module docstring); its size in bytes."""
        partial = self.path.with_name(self.path.name + PARTIAL_SUFFIX)
        self.path.parent.mkdir(parents=True, exist_ok=True)  # a memory copy's node may not be rank 0's
        try:
            if self.kind == "safetensors":
                from safetensors.torch import save_file

                save_file(self.state, str(partial), metadata=self.metadata)
                fsync_path(partial)
            else:
                import torch

                with partial.open("wb") as handle, without_crc32():
                    torch.save(self.state, paced(handle))
                    handle.flush()
                    os.fsync(handle.fileno())
            os.replace(partial, self.path)
        except BaseException:
            partial.unlink(missing_ok=True)
            raise
        return self.path.stat().st_size


@contextmanager
def without_crc32() -> Iterator[None]:
    """torch.save without the zip records' CRC-32 (see the module docstring); a process-wide setting, so a torch.save
    of the training thread meanwhile (a small file of the next save) may skip it too: nothing reads it."""
    from torch.utils.serialization import config

    before = config.save.compute_crc32
    config.save.compute_crc32 = False
    try:
        yield
    finally:
        config.save.compute_crc32 = before


def lower_priority() -> None:
    """This thread at nice WRITER_NICENESS (Linux sets it per thread); nothing where that is not allowed."""
    with suppress(OSError, AttributeError):
        os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), WRITER_NICENESS)


def fsync_path(path: Path) -> None:
    """Flush a file's (or a folder's entries') written pages to the disk."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def fsync_tree(folder: Path) -> None:
    """Every file under folder, and every folder's entries, on disk (the ones already flushed cost a syscall)."""
    for path in sorted(folder.rglob("*"), reverse=True):
        fsync_path(path)
    fsync_path(folder)


class PacedFile:
    """A file object that sleeps `pause` seconds after each PACE_BYTES written (PAUSE_VARIABLE's fault tests)."""

    def __init__(self, handle: BinaryIO, pause: float) -> None:
        self.handle = handle
        self.pause = pause

    def write(self, data) -> int:
        view = memoryview(data).cast("B")
        for start in range(0, len(view), PACE_BYTES):
            self.handle.write(view[start : start + PACE_BYTES])
            self.handle.flush()
            time.sleep(self.pause)
        return len(view)

    def flush(self) -> None:
        self.handle.flush()


def paced(handle: BinaryIO) -> BinaryIO | PacedFile:
    pause = float(os.environ.get(PAUSE_VARIABLE) or 0)
    return PacedFile(handle, pause) if pause > 0 else handle
