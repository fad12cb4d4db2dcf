"""A checkpoint's universal form: DeepSpeed's per-parameter files, which resume on any number of ranks.

A ZeRO checkpoint holds the optimizer state sharded per rank, so it only loads with the world
size that wrote it. DeepSpeed's ds_to_universal turns the shards into per-parameter files next
to them (`global_stepN_universal/`, named by `latest_universal`); `train --resume` then loads
those with `checkpoint.load_universal` whenever the rank count differs. The original shards are
kept: the checkpoint still resumes as before with its own rank count. Both `zerokit universal`
(zerokit.commands.universal) and `train`, on a resume with another rank count, convert with `convert`.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from zerokit.foundations.errors import UserError
from zerokit.foundations.files import write_atomically
from zerokit.outputs.checkpoints import damage, is_universal, needs_universal_load, ranks, saved_world_size
from zerokit.outputs.ownership import built_beside, check_writable


def convert(checkpoint: Path) -> Path:
    """Convert checkpoint (a `checkpoint-N` folder) in place, beside its shards; returns the universal folder."""
    if not (checkpoint / "trainer_state.json").is_file():
        what = "no such folder" if not checkpoint.exists() else "not a complete checkpoint (no trainer_state.json)"
        raise UserError(f"{checkpoint}: {what}: give a checkpoint-N folder that train wrote (e.g. runs/x/checkpoint-9)")
    check_writable(checkpoint, "checkpoint")  # the universal form is written beside the shards
    if why := damage(checkpoint):
        raise UserError(f"{checkpoint} is damaged ({why}): convert an earlier checkpoint-N")
    latest = checkpoint / "latest"
    if not latest.is_file():
        raise UserError(f"{checkpoint} has no DeepSpeed state (no `latest` file): it was not written under ZeRO")
    tag = latest.read_text().strip()
    target = checkpoint / f"{tag}_universal"
    if is_universal(checkpoint):
        return target
    with built_beside(target, "universal", "checkpoint") as partial:  # one conversion at a time, whole or none
        command = [sys.executable, "-m", "deepspeed.checkpoint.ds_to_universal"]
        command += ["--input_folder", str(checkpoint / tag), "--output_folder", str(partial)]
        command += ["--inject_missing_state"]  # the Trainer saves no universal_checkpoint_info under ZeRO-1/2
        result = subprocess.run(command, capture_output=True, text=True)
        if result.returncode != 0 or not (checkpoint / "latest_universal").is_file():
            log = checkpoint / "universal-conversion.log"
            log.write_text(result.stdout + result.stderr)
            raise UserError(f"ds_to_universal failed on {checkpoint / tag} (exit code {result.returncode}): see {log}")
    write_atomically(checkpoint / "latest_universal", target.name)  # it named the folder it wrote: partial
    return target


def needs_conversion(checkpoint: Path, world: int, tp: int) -> bool | None:
    """How world ranks in tensor-parallel groups of tp resume checkpoint: None as written; else in its universal
    form, True where that is still to be written (beside its shards). One line where it cannot (needs_universal_load),
    or where its folder cannot take the conversion."""
    if not needs_universal_load(checkpoint, world, tp):
        return None
    if is_universal(checkpoint):
        return False
    if not os.access(checkpoint, os.W_OK | os.X_OK):
        written = ranks(saved_world_size(checkpoint))
        raise UserError(
            f"checkpoint {checkpoint} was written by {written}, this run has {world}, and its folder is not "
            f"writable for its universal form: resume a copy of it in a writable folder, or resume with {written}"
        )
    return True
