"""Checkpoints: written atomically, found for `--resume auto`, checked against the world size.

The Trainer writes `checkpoint-N` in place, so a crash mid-write leaves a half checkpoint that
looks like the newest. Here it is written into `tmp-checkpoint-N/` and moved to `checkpoint-N`
by the saving rank once every rank has finished; a `tmp-` folder is never picked for resuming.
"""

from __future__ import annotations

import os
import re
import shutil
from pathlib import Path

from transformers import Trainer
from transformers.trainer_utils import PREFIX_CHECKPOINT_DIR, rotate_checkpoints

from zerokit.errors import UserError

CHECKPOINT_NAME = re.compile(rf"{PREFIX_CHECKPOINT_DIR}-(\d+)")
STAGING_PREFIX = "tmp-"


def newest_complete_checkpoint(output_dir: Path) -> Path | None:
    """The `checkpoint-N` with the highest N that has its trainer state; None if there is none."""
    if not output_dir.is_dir():
        return None
    found = [
        (int(match.group(1)), path)
        for path in output_dir.iterdir()
        if (match := CHECKPOINT_NAME.fullmatch(path.name)) and (path / "trainer_state.json").is_file()
    ]
    return max(found)[1] if found else None


def resolve_resume(value: str | None, output_dir: Path) -> Path | None:
    """`--resume auto`: the newest complete checkpoint (None: start fresh); `--resume PATH`: that checkpoint."""
    if value is None:
        return None
    if value == "auto":
        return newest_complete_checkpoint(output_dir)
    path = Path(value)
    if not (path / "trainer_state.json").is_file():
        raise UserError(f"--resume {value}: not a complete checkpoint (no trainer_state.json); or use --resume auto")
    return path


def saved_world_size(checkpoint: Path) -> int:
    """Ranks that wrote the checkpoint: the Trainer saves one rng_state_<rank>.pth each when there are several."""
    return len(list(checkpoint.glob("rng_state_*.pth"))) or 1


def is_universal(checkpoint: Path) -> bool:
    """Converted by `zerokit universal`: ds_to_universal writes latest_universal when it has finished."""
    return (checkpoint / "latest_universal").is_file()


def needs_universal_load(checkpoint: Path, world_size: int) -> bool:
    """Whether resuming checkpoint with world_size ranks loads its universal form; one line if it cannot."""
    saved = saved_world_size(checkpoint)
    if saved == world_size:
        return False
    if is_universal(checkpoint):
        return True
    raise UserError(
        f"checkpoint {checkpoint} was written by {saved} ranks, this run has {world_size}: its optimizer "
        f"state is sharded per rank. Resume with {saved} ranks; or convert it once, `zerokit universal "
        f"{checkpoint}`, and resume with any count; or restart from its consolidated weights with a fresh "
        f"optimizer: `train --model {checkpoint} ...` without --resume"
    )


class AtomicCheckpointTrainer(Trainer):
    """A Trainer whose checkpoints appear complete or not at all (see the module docstring)."""

    _staging: Path | None = None

    def _get_output_dir(self, trial) -> str:
        return str(self._staging) if self._staging else super()._get_output_dir(trial)

    def _save_checkpoint(self, model, trial) -> None:
        run_dir = Path(super()._get_output_dir(trial))
        name = f"{PREFIX_CHECKPOINT_DIR}-{self.state.global_step}"
        staging = run_dir / f"{STAGING_PREFIX}{name}"
        if self.args.should_save and staging.exists():  # left by a run killed while saving
            shutil.rmtree(staging)
        self.accelerator.wait_for_everyone()
        self._staging = staging
        try:
            super()._save_checkpoint(model, trial)  # writes staging/checkpoint-N
        finally:
            self._staging = None
        self.accelerator.wait_for_everyone()  # every rank has written its shards
        if self.args.should_save:
            publish(staging / name, run_dir / name)
            shutil.rmtree(staging)
            rotate_checkpoints(
                output_dir=str(run_dir),
                save_total_limit=self.args.save_total_limit,
                best_model_checkpoint=self.state.best_model_checkpoint,
            )
        self.accelerator.wait_for_everyone()


def publish(written: Path, final: Path) -> None:
    """Move a finished checkpoint into place; an older one of the same step is moved aside first."""
    if final.exists():
        old = final.with_name(f"{STAGING_PREFIX}old-{final.name}")
        shutil.rmtree(old, ignore_errors=True)
        os.replace(final, old)
        os.replace(written, final)
        shutil.rmtree(old)
    else:
        os.replace(written, final)
