"""Checkpoints: found for `--resume auto`, checked for damage, checked against the world size.

Pure file logic (no torch): `train` checks the output folder with it before any rank starts.
How checkpoints are written (atomically, rotated) is in zerokit.train.engines.hf_trainer.

A checkpoint can be damaged after it was written whole (a node dies while a file system
flushes, a quota cuts a copy short). Each checkpoint carries SIZES_NAME, the size of every file
as written: a file missing or of another size marks it damaged. One without that record (an
older zerokit's, or the Trainer's own) is checked by format instead: a torch zip without its
directory, a safetensors file shorter than its header says. `--resume auto` then falls back to
the newest checkpoint that is whole, and says so.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import struct
import zipfile
from pathlib import Path

from zerokit.foundations.errors import UserError
from zerokit.outputs import ownership

PREFIX = "checkpoint"  # the Trainer's PREFIX_CHECKPOINT_DIR
CHECKPOINT_NAME = re.compile(rf"{PREFIX}-(\d+)")
STAGING_PREFIX = "tmp-"
SIZES_NAME = "zerokit-checkpoint.json"
TORCH_ZIP_SUFFIXES = (".pt", ".pth", ".bin")
PIPELINE_NAME = "zerokit-pipeline.json"  # in a `--pp-size` checkpoint: {"pp_size": P, "dp_size": D}


def checkpoint_step(path: Path) -> int | None:
    """The step of a `checkpoint-N` folder; None for any other name."""
    match = CHECKPOINT_NAME.fullmatch(path.name)
    return int(match.group(1)) if match else None


def complete_checkpoints(output_dir: Path) -> list[Path]:
    """This run's `checkpoint-N` folders that have their trainer state, newest first.

    Checkpoints that were in the folder before this run's chain began (foreign, see
    zerokit.outputs.ownership) are not this run's: never resumed from, never rotated.
    """
    if not output_dir.is_dir():
        return []
    foreign = ownership.foreign_entries(output_dir)
    found = [
        (int(match.group(1)), path)
        for path in output_dir.iterdir()
        if (match := CHECKPOINT_NAME.fullmatch(path.name))
        and path.name not in foreign
        and (path / "trainer_state.json").is_file()
    ]
    return [path for _, path in sorted(found, reverse=True)]


def newest_complete_checkpoint(output_dir: Path) -> Path | None:
    found = complete_checkpoints(output_dir)
    return found[0] if found else None


class AllCheckpointsDamaged(UserError):
    """--resume auto found checkpoints, none whole: every rank finds the same, rank 0 says it."""

    every_rank = True


def resolve_resume(value: str | None, output_dir: Path, notes: list[str] | None = None) -> Path | None:
    """`--resume auto`: the newest whole checkpoint (None: no checkpoint, start fresh), a damaged one skipped
    with a note, and a run whose every checkpoint is damaged refused (never started over); `--resume PATH`:
    that checkpoint, which must be whole."""
    if value is None:
        return None
    if value == "auto":
        damaged = []
        for checkpoint in complete_checkpoints(output_dir):
            why = damage(checkpoint)
            if why is None:
                return checkpoint
            damaged.append(checkpoint.name)
            if notes is not None:
                notes.append(f"checkpoint {checkpoint} is damaged ({why}): skipped, trying the one before it")
        if damaged:
            raise AllCheckpointsDamaged(
                f"--resume auto: every checkpoint of {output_dir} is damaged ({', '.join(damaged)}), so nothing "
                "was started over it: resume from a whole copy with --resume PATH, or start again with --overwrite"
            )
        return None
    path = Path(value)
    if not (path / "trainer_state.json").is_file():
        raise UserError(f"--resume {value}: not a complete checkpoint (no trainer_state.json); or use --resume auto")
    if why := damage(path):
        raise UserError(
            f"--resume {value}: the checkpoint is damaged ({why}): resume from an earlier checkpoint-N, "
            "or pass --resume auto (it skips damaged ones)"
        )
    return path


def check_output_dir(path: Path, overwrite: bool, resume: str | None) -> None:
    """Whether a run may write into path: never over a finished run or other files unasked.

    `--resume` writes into a folder only when there is something of this run to continue (a
    checkpoint, or a run that did not finish); a finished run with no checkpoint is not resumed
    but replaced, which needs --overwrite.
    """
    ownership.check_writable(path, "--output-dir")
    if path.exists() and not path.is_dir():
        raise UserError(f"output {path} exists and is a file: pick another --output-dir")
    if overwrite or not ownership.entries(path):
        return
    record = ownership.read_record(path)
    finished = record.finished if record else (path / "train_results.json").is_file()
    if resume is not None and (newest_complete_checkpoint(path) or (record and not finished)):
        return
    if finished:
        raise UserError(
            f"output folder {path} holds a finished run and no checkpoint to resume: pick another --output-dir, "
            "or pass --overwrite to replace that run's files"
        )
    raise UserError(
        f"output folder {path} exists and is not empty: pick another --output-dir, "
        "or pass --overwrite to write into it (files that no earlier run wrote are kept)"
    )


def damage(checkpoint: Path) -> str | None:
    """Why checkpoint cannot be loaded as written, or None when every file is whole.

    Every rank asks before the process group exists, so the check stays cheap on a parallel file
    system: with the recorded sizes, one stat per file; only a checkpoint without them (written
    before zerokit recorded sizes) has its files' formats read.
    """
    sizes_path = checkpoint / SIZES_NAME
    if not sizes_path.is_file():
        for file in sorted(p for p in checkpoint.rglob("*") if p.is_file()):
            if why := file_damage(file):
                return f"{file} {why}"
        return None
    try:
        sizes = json.loads(sizes_path.read_text())
    except ValueError:
        return f"{sizes_path} is not valid JSON"
    for name, size in sizes.items():
        file = checkpoint / name
        if not file.is_file():
            return f"{file} is missing"
        if (actual := file.stat().st_size) != size:
            return f"{file} has {actual} bytes, {size} were written"
    return None


def file_damage(file: Path) -> str | None:
    """A cheap check of one file by its format (no tensor is loaded)."""
    try:
        if file.suffix in TORCH_ZIP_SUFFIXES:
            if not zipfile.is_zipfile(file):
                return "is truncated or not a torch.save file (no zip directory)"
        elif file.suffix == ".safetensors":
            return _safetensors_damage(file)
        elif file.suffix == ".json":
            json.loads(file.read_text())
    except (OSError, ValueError, UnicodeDecodeError) as error:
        return f"cannot be read ({error})"
    return None


def _safetensors_damage(file: Path) -> str | None:
    size = file.stat().st_size
    with file.open("rb") as handle:
        head = handle.read(8)
        if len(head) < 8:
            return "is truncated (no header)"
        (header_size,) = struct.unpack("<Q", head)
        if 8 + header_size > size:
            return "is truncated (shorter than its header)"
        header = json.loads(handle.read(header_size))
    end = max((t["data_offsets"][1] for k, t in header.items() if k != "__metadata__"), default=0)
    if 8 + header_size + end != size:
        return f"is truncated ({size} bytes, its header says {8 + header_size + end})"
    return None


def record_sizes(checkpoint: Path) -> None:
    """Write SIZES_NAME: every file's size, as written (before the checkpoint is published)."""
    sizes = {str(p.relative_to(checkpoint)): p.stat().st_size for p in sorted(checkpoint.rglob("*")) if p.is_file()}
    (checkpoint / SIZES_NAME).write_text(json.dumps(sizes, indent=1) + "\n")


def saved_world_size(checkpoint: Path) -> int:
    """Ranks that wrote the checkpoint: the Trainer saves one rng_state_<rank>.pth each when there are several."""
    return len(list(checkpoint.glob("rng_state_*.pth"))) or 1


def saved_tp_size(checkpoint: Path) -> int:
    """Tensor-parallel ranks that wrote the checkpoint: DeepSpeed saves one mp_rank_<r>_model_states.pt per
    rank of a tensor-parallel group (1 without tensor parallelism, or without DeepSpeed)."""
    latest = checkpoint / "latest"
    if not latest.is_file():
        return 1
    return len(list((checkpoint / latest.read_text().strip()).glob("mp_rank_*_model_states.pt"))) or 1


def saved_pipeline(checkpoint: Path) -> dict[str, int] | None:
    """The layout a `--pp-size` run wrote checkpoint with; None for the Trainer's checkpoints."""
    try:
        return json.loads((checkpoint / PIPELINE_NAME).read_text())
    except (OSError, ValueError):
        return None


def check_pipeline_resume(checkpoint: Path, layout: dict[str, int] | None) -> None:
    """Whether a run with this pipeline layout (None: no --pp-size) can resume checkpoint; one line if not.

    A pipeline checkpoint holds one file per layer and ZeRO-1 optimizer shards per stage and replica, a
    Trainer checkpoint neither: each resumes only in the layout that wrote it. Both hold the whole model
    (model.safetensors), which any layout can start from with a fresh optimizer.
    """
    saved = saved_pipeline(checkpoint)
    if saved == layout:
        return
    restart = f"or restart from its weights with a fresh optimizer: `train --model {checkpoint} ...` without --resume"
    if saved is None:
        raise UserError(
            f"checkpoint {checkpoint} was written without --pp-size, this run has --pp-size {layout['pp_size']}: "
            f"resume it without --pp-size; {restart}"
        )
    was = f"--pp-size {saved['pp_size']} on {saved['pp_size'] * saved['dp_size']} ranks"
    if layout is None:
        raise UserError(
            f"checkpoint {checkpoint} was written with {was}, this run has no --pp-size: resume with {was}; {restart}"
        )
    now = f"--pp-size {layout['pp_size']} on {layout['pp_size'] * layout['dp_size']} ranks"
    raise UserError(f"checkpoint {checkpoint} was written with {was}, this run has {now}: resume with {was}; {restart}")


def is_universal(checkpoint: Path) -> bool:
    """Converted (zerokit.outputs.universal): ds_to_universal writes latest_universal, naming the folder it wrote,
    when it has finished (and that folder is in place)."""
    latest = checkpoint / "latest_universal"
    return latest.is_file() and (checkpoint / latest.read_text().strip()).is_dir()


def needs_universal_load(checkpoint: Path, world_size: int, tp_size: int = 1) -> bool:
    """Whether resuming checkpoint with world_size ranks in tensor-parallel groups of tp_size loads its universal
    form; one line if it cannot. Each rank's files hold its shard of the optimizer state and, under tensor
    parallelism, of the split layers: another rank count or --tp-size needs the universal form. `train` writes
    it itself for another rank count at the same --tp-size (zerokit.train.checkpoints.resharded); another --tp-size
    needs it written first, by `zerokit universal` (a TP=2 checkpoint so converted resumes at TP=1 on the same curve:
    issue 29)."""
    saved, saved_tp = saved_world_size(checkpoint), saved_tp_size(checkpoint)
    if saved == world_size and saved_tp == tp_size:
        return False
    if is_universal(checkpoint):
        return True
    restart = f"or restart from its whole weights with a fresh optimizer: `train --model {checkpoint} ...`"
    restart += " without --resume"
    if saved_tp != tp_size:
        raise UserError(
            f"checkpoint {checkpoint} was written with --tp-size {saved_tp}, this run has --tp-size {tp_size}: each "
            f"rank saved its share of the split layers. Resume with --tp-size {saved_tp}; or convert it once, "
            f"`zerokit universal {checkpoint}`, and resume with another; {restart}"
        )
    if not (checkpoint / "latest").is_file():
        raise UserError(
            f"checkpoint {checkpoint} was written by {saved} ranks without DeepSpeed (no `latest` file), this run "
            f"has {world_size}: resume with {saved} ranks; {restart}"
        )
    return True


def rotate(output_dir: Path, limit: int | None, best: Path | None = None) -> None:
    """Keep this run's newest `limit` checkpoints, and the best one, as the Trainer's rotation does;
    foreign checkpoints (an earlier run's) are never touched, nor is a damaged one: it may hold the only
    copy of its steps that a user can still rescue (`--resume auto` refuses a run whose checkpoints are
    all damaged, and names them)."""
    if not limit:
        return
    ordered = [c for c in complete_checkpoints(output_dir)[::-1] if damage(c) is None]  # whole ones, oldest first
    if best in ordered and ordered[-1] != best:
        ordered.remove(best)
        ordered.insert(len(ordered) - 1, best)  # second newest: kept while the limit allows two
        limit = max(limit, 2)
    for old in ordered[: max(0, len(ordered) - limit)]:
        shutil.rmtree(old, ignore_errors=True)


def publish(written: Path, final: Path) -> None:
    """Move a finished checkpoint into place; an older one of the same step is moved aside first."""
    record_sizes(written)
    if final.exists():
        old = final.with_name(f"{STAGING_PREFIX}old-{final.name}")
        shutil.rmtree(old, ignore_errors=True)
        os.replace(final, old)
        os.replace(written, final)
        shutil.rmtree(old)
    else:
        os.replace(written, final)


def ranks(count: int, kind: str = "") -> str:
    """The writers or readers of a checkpoint, as the lines about it say: "1 rank", "2 data-parallel ranks"."""
    return f"{count} {kind + ' ' if kind else ''}rank{'s' if count != 1 else ''}"
