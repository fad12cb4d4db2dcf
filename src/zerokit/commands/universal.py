"""`universal`: convert a checkpoint to DeepSpeed's universal format, to resume it on another number of ranks.

A ZeRO checkpoint holds the optimizer state sharded per rank, so it only loads with the world
size that wrote it. DeepSpeed's ds_to_universal turns the shards into per-parameter files next
to them (`global_stepN_universal/`, named by `latest_universal`); `train --resume` then loads
those with `checkpoint.load_universal` whenever the rank count differs. The original shards are
kept: the checkpoint still resumes as before with its own rank count.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from zerokit.foundations.errors import UserError
from zerokit.foundations.files import write_atomically
from zerokit.foundations.flags import command_parser, flag, from_namespace
from zerokit.outputs.checkpoints import PREFIX, complete_checkpoints, damage, is_universal
from zerokit.outputs.ownership import built_beside, check_writable


def convert(checkpoint: Path) -> Path:
    """Convert checkpoint (a `checkpoint-N` folder) in place; returns the universal folder."""
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


def checkpoint_to_convert(path: Path) -> Path:
    """A checkpoint-N folder as given; a run folder (train's --output-dir): its newest whole checkpoint."""
    if (path / "latest").is_file() or not list(path.glob(f"{PREFIX}-*")):
        return path
    newest = next((c for c in complete_checkpoints(path) if not damage(c)), None)
    if newest is None:
        raise UserError(f"{path} is a run folder with no whole checkpoint-N to convert: give one by its path")
    print(f"universal: {path} is a run folder: converting its newest whole checkpoint, {newest.name}")
    return newest


@dataclass(frozen=True)
class UniversalFlags:
    """`universal`'s arguments, each defined once here (zerokit.foundations.flags)."""

    checkpoint: Path = flag(
        "checkpoint", type=Path, help="a checkpoint-N folder (runs/long/checkpoint-500), or a run folder: its newest"
    )


def build_parser(environ: Mapping[str, str] = os.environ) -> argparse.ArgumentParser:
    return command_parser(UniversalFlags, environ, prog="zerokit universal", description=__doc__.splitlines()[0])


def main(argv: list[str]) -> int:
    args = from_namespace(UniversalFlags, build_parser().parse_args(argv))
    target = convert(checkpoint_to_convert(args.checkpoint))
    print(f"universal: {target} written; `train --resume auto` (or a path) now loads it with any rank count")
    return 0
