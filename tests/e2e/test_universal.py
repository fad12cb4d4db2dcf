"""A ZeRO-2 or ZeRO-3 checkpoint of 2 ranks resumes on 1 rank on the same curve: converted ahead with `zerokit
universal` (ZeRO-2, the default: the Trainer saves no universal_checkpoint_info, which universal injects), or by
`train` itself on `--resume auto`, which also keeps the global batch with gradient accumulation.

The global batch is kept (1 x 16 = 2 x 8, and 1 x 8 x 2 accumulation) and dropout is off (each rank draws its own
masks), so the resumed run must follow the uninterrupted 2-rank run step for step: weights, optimizer state,
learning-rate schedule and data position all come through the conversion.
"""

from __future__ import annotations

import shutil
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.conftest import logged_losses, run_zerokit

NO_DROPOUT = "resid_pdrop=0,embd_pdrop=0,attn_pdrop=0"


def train_argv(output: Path, ranks: int, steps: int, *extra: str, config: str, micro: int | None = None) -> list[str]:
    return [
        "train", "--config", config, "--nproc-per-node", str(ranks), "--output-dir", str(output),
        "--max_steps", str(steps), "--per_device_train_batch_size", str(micro or 16 // ranks), "--logging_steps", "1",
        "--seed", "7", "--config-overrides", NO_DROPOUT, "--save_strategy", "steps", "--save_steps", "10", *extra,
    ]  # fmt: skip


@pytest.fixture(scope="module")
def baseline(runs: Path, env) -> Callable[[str], Path]:
    """The uninterrupted 2-rank run of a config (20 steps, micro 8, checkpoint-10): trained once per module, on
    the first test that asks; each test resumes a copy of its checkpoint-10, what a run stopped there would leave."""
    trained: dict[str, Path] = {}

    def of(config: str) -> Path:
        if config not in trained:
            output = runs / f"baseline-{config}"
            result = run_zerokit(train_argv(output, 2, 20, config=config), env)
            assert result.returncode == 0, result.stderr[-3000:]
            trained[config] = output
        return trained[config]

    return of


@pytest.mark.parametrize("config", ["zero2", "zero3"])
def test_two_rank_checkpoint_resumes_on_one_rank_after_conversion(tmp_path: Path, env, baseline, config: str):
    checkpoint = tmp_path / "stopped" / "checkpoint-10"
    shutil.copytree(baseline(config) / "checkpoint-10", checkpoint)

    # Given the run folder (train's --output-dir), universal converts its newest whole checkpoint.
    result = run_zerokit(["universal", str(checkpoint.parent)], env)
    assert result.returncode == 0, result.stderr[-3000:]
    said = f"{checkpoint.parent} is a run folder: converting its newest whole checkpoint, checkpoint-10"
    assert said in result.stdout
    assert (checkpoint / "latest_universal").read_text().strip() == "global_step10_universal"
    assert len(list((checkpoint / "global_step10").glob("*optim_states.pt"))) == 2  # the shards are kept

    run = tmp_path / "run"
    result = run_zerokit(train_argv(run, 1, 20, "--resume", str(checkpoint), config=config), env)
    assert result.returncode == 0, result.stderr[-3000:]
    assert f"resuming from {checkpoint} (its universal form" in result.stdout
    resumed, expected = logged_losses(run), logged_losses(baseline(config))
    assert len(resumed) == len(expected) == 20
    assert resumed == pytest.approx(expected, rel=1e-4), list(zip(resumed, expected, strict=True))


def test_train_converts_a_two_rank_checkpoint_itself_and_keeps_its_global_batch(tmp_path: Path, env, baseline):
    """1 rank at the 2-rank run's micro batch (8): train converts checkpoint-10 (no `zerokit universal`) and
    accumulates 2 micro-batches per step, so steps 11-20 follow the uninterrupted run's."""
    run = tmp_path / "run"
    checkpoint = run / "checkpoint-10"
    shutil.copytree(baseline("zero2") / "checkpoint-10", checkpoint)

    result = run_zerokit(train_argv(run, 1, 20, "--resume", "auto", config="zero2", micro=8), env)
    assert result.returncode == 0, result.stderr[-3000:]
    converting = f"zerokit: checkpoint {checkpoint} was written by 2 ranks, this run has 1: converting it to its"
    assert f"{converting} universal form once (beside the original)" in result.stdout
    kept = "this run has 1 data-parallel rank and micro 8: gradient accumulation 1 -> 2 keeps the global batch of 16"
    assert kept in result.stderr
    assert (checkpoint / "latest_universal").read_text().strip() == "global_step10_universal"
    assert len(list((checkpoint / "global_step10").glob("*optim_states.pt"))) == 2  # beside the shards, kept
    resumed, expected = logged_losses(run), logged_losses(baseline("zero2"))
    assert len(resumed) == len(expected) == 20
    assert resumed[10:] == pytest.approx(expected[10:], rel=1e-4), list(zip(resumed, expected, strict=True))
