"""`universal`: convert a checkpoint to DeepSpeed's universal format, to resume it on another number of ranks.

The conversion is zerokit.outputs.universal's, which `train` also runs on a resume with another rank count;
converting ahead of time saves that run the wait (and a conversion longer than its process group's timeout).
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from zerokit.foundations.errors import UserError
from zerokit.foundations.flags import command_parser, flag, from_namespace
from zerokit.outputs.checkpoints import PREFIX, complete_checkpoints, damage
from zerokit.outputs.universal import convert


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
