"""During the Trainer's save, the large files are copied to host memory instead of written: `capturing`.

The Trainer's `_save_checkpoint` runs as it always does (so every file it writes is in the checkpoint: the
trainer state, the RNG states, the tokenizer and config, DeepSpeed's `latest` and recovery scripts, the
arguments), with the two writers of the large files swapped for the time of the call:

- DeepSpeed's checkpoint engine (`engine.checkpoint_engine`: every `torch.save` of its module and optimizer
  states goes through it) by HostCopyEngine, whose `save` copies the state into host buffers and returns;
- transformers' `safe_save_file` (what `save_pretrained` writes `model.safetensors` with) by a function that
  does the same.

Each copy becomes a PendingFile that the background writer writes once the save has returned. What is not
captured (a LoRA adapter, a run without DeepSpeed's optimizer files), and a file whose copy finds no room in the
node's memory (zerokit.train.checkpoints.host_snapshot.NoHostRoom: said once per run), is written in place, as in a
synchronous save: never lost, only not in the background.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from zerokit.train.checkpoints.files import PendingFile
from zerokit.train.checkpoints.host_snapshot import HostSnapshot, NoHostRoom


class Capture:
    """The files one save deferred, their state copied into the snapshot's buffers."""

    warned = False  # the run's one line about files written in place for want of host memory

    def __init__(self, snapshot: HostSnapshot) -> None:
        self.snapshot = snapshot
        self.files: list[PendingFile] = []

    def torch_file(self, state: Any, path: str | os.PathLike, write_now: Callable[[], None]) -> None:
        path = Path(path)
        try:
            self.files.append(PendingFile(path, self.snapshot.copy(state, path.name), "torch"))
        except NoHostRoom as why:
            self.in_place(path, why, write_now)

    def safetensors_file(
        self, tensors: dict, path: str | os.PathLike, metadata: dict | None, write_now: Callable[[], None]
    ) -> None:
        path = Path(path)
        try:
            copied = self.snapshot.copy(tensors, path.name, distinct=True)
        except NoHostRoom as why:
            self.in_place(path, why, write_now)
            return
        self.files.append(PendingFile(path, copied, "safetensors", metadata))

    def in_place(self, path: Path, why: NoHostRoom, write_now: Callable[[], None]) -> None:
        if not Capture.warned:
            Capture.warned = True
            print(
                f"zerokit: no host memory to copy {path.name} for a background write ({why}): it is written before "
                "training goes on, as --checkpoint-write sync does (said once)",
                file=sys.stderr,
                flush=True,
            )
        write_now()


class HostCopyEngine:
    """A DeepSpeed checkpoint engine (deepspeed.runtime.checkpoint_engine's interface, as DeepSpeedEngine's
    save_checkpoint calls it) whose save copies the state to host memory; the writer writes it later. Not
    decoupled: DeepSpeed writes `latest` at the end of save_checkpoint, into the staging folder, as it always does."""

    name = "zerokit-host-copy"

    def __init__(self, capture: Capture, replaced: Any) -> None:
        self.capture = capture
        self.replaced = replaced  # the engine's own, for anything but saving

    def create(self, info) -> None:
        pass

    def save(self, state_dict, path: str) -> None:
        self.capture.torch_file(state_dict, path, lambda: self.replaced.save(state_dict, path))

    def makedirs(self, path, exist_ok: bool = False) -> None:
        os.makedirs(path, exist_ok=exist_ok)

    def load(self, path: str, map_location=None):
        return self.replaced.load(path, map_location=map_location)

    def commit(self, info) -> bool:
        return True

    def is_data_parallel_writer(self, dp_rank) -> bool:
        return self.replaced.is_data_parallel_writer(dp_rank)

    def is_decoupled(self) -> bool:
        return False

    def set_commit_info(self, info) -> None:
        pass

    def get_commit_info(self) -> None:
        return None

    def cleanup(self) -> None:
        pass

    def preserves_storage_sharing(self) -> bool:
        return False  # no clone first: the host copy is the copy


@contextmanager
def capturing(engine: Any, capture: Capture) -> Iterator[None]:
    """For the time of one Trainer save: DeepSpeed's engine (None without DeepSpeed) and transformers' safetensors
    writer copy to host memory instead of writing."""
    from transformers import modeling_utils

    safe_save_file = modeling_utils.safe_save_file

    def copy_safetensors(tensors: dict, filename: str, metadata: dict | None = None) -> None:
        if not tensors:  # ZeRO-3's placeholder model file, removed right after it is written: written as is
            safe_save_file(tensors, filename, metadata=metadata)
            return
        capture.safetensors_file(
            tensors, filename, metadata, lambda: safe_save_file(tensors, filename, metadata=metadata)
        )

    replaced = getattr(engine, "checkpoint_engine", None)
    if replaced is not None:
        engine.checkpoint_engine = HostCopyEngine(capture, replaced)
    modeling_utils.safe_save_file = copy_safetensors
    try:
        yield
    finally:
        modeling_utils.safe_save_file = safe_save_file
        if replaced is not None:
            engine.checkpoint_engine = replaced
