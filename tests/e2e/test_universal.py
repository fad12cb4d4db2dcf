"""A ZeRO-2 or ZeRO-3 checkpoint of 2 ranks, converted with `zerokit universal`, resumes on 1 rank on the same
curve (ZeRO-2, the default: the Trainer saves no universal_checkpoint_info, which universal injects).

The global batch is kept (1 x 16 = 2 x 8) and dropout is off (each rank draws its own masks), so
the resumed run must follow the uninterrupted 2-rank run step for step: weights, optimizer state,
learning-rate schedule and data position all come through the conversion.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from tests.conftest import logged_losses, run_zerokit

NO_DROPOUT = "resid_pdrop=0,embd_pdrop=0,attn_pdrop=0"


def train_argv(output: Path, ranks: int, steps: int, *extra: str, config: str = "zero3") -> list[str]:
    return [
        "train", "--config", config, "--nproc-per-node", str(ranks), "--output-dir", str(output),
        "--max_steps", str(steps), "--per_device_train_batch_size", str(16 // ranks), "--logging_steps", "1",
        "--seed", "7", "--config-overrides", NO_DROPOUT, "--save_strategy", "steps", "--save_steps", "10", *extra,
    ]  # fmt: skip


@pytest.mark.parametrize("config", ["zero2", "zero3"])
def test_two_rank_checkpoint_resumes_on_one_rank_after_conversion(tmp_path: Path, zk_env, config: str):
    baseline = tmp_path / "baseline"
    result = run_zerokit(train_argv(baseline, 2, 20, config=config), zk_env)
    assert result.returncode == 0, result.stderr[-3000:]
    # The uninterrupted run's own checkpoint at step 10, copied: what a run stopped there would have left.
    checkpoint = tmp_path / "stopped" / "checkpoint-10"
    shutil.copytree(baseline / "checkpoint-10", checkpoint)

    # Given the run folder (train's --output-dir), universal converts its newest whole checkpoint.
    result = run_zerokit(["universal", str(checkpoint.parent)], zk_env)
    assert result.returncode == 0, result.stderr[-3000:]
    said = f"{checkpoint.parent} is a run folder: converting its newest whole checkpoint, checkpoint-10"
    assert said in result.stdout
    assert (checkpoint / "latest_universal").read_text().strip() == "global_step10_universal"
    assert len(list((checkpoint / "global_step10").glob("*optim_states.pt"))) == 2  # the shards are kept

    run = tmp_path / "run"
    result = run_zerokit(train_argv(run, 1, 20, "--resume", str(checkpoint), config=config), zk_env)
    assert result.returncode == 0, result.stderr[-3000:]
    assert f"resuming from {checkpoint} (its universal form" in result.stdout
    resumed, expected = logged_losses(run), logged_losses(baseline)
    assert len(resumed) == len(expected) == 20
    assert resumed == pytest.approx(expected, rel=1e-4), list(zip(resumed, expected, strict=True))
