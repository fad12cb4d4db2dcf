"""Checkpoints written in the background (`train --checkpoint-write background`, the default): the same curve as
a foreground save, and never half-published.

- ZeRO-2 on 2 ranks: a run saving in the background, resumed from its checkpoint-4 by a run saving in the
  foreground, logs the uninterrupted run's losses (within 1e-6; `--deterministic`: torch's AdamW on CPU, whose
  bias correction survives a resume exactly), and both runs' checkpoint-8 hold the same files and weights.
  ZeRO-3's background checkpoints resume on the uninterrupted curve in tests/e2e/test_preemption.py (the default
  writes them there).
- The writers of both ranks SIGKILLed while each is half way through a file of checkpoint-8 (paced by the fault
  tests' variable, zerokit.train.checkpoints.files.PAUSE_VARIABLE): checkpoint-8 is never published, `--resume auto`
  takes checkpoint-4, finishes and clears the half-written folder.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from tests.conftest import REPO, logged_losses, run_zerokit
from zerokit.outputs.checkpoints import damage, newest_complete_checkpoint
from zerokit.train.checkpoints.files import PARTIAL_SUFFIX, PAUSE_VARIABLE

NO_DROPOUT = "resid_pdrop=0,embd_pdrop=0,attn_pdrop=0"


def train_argv(output: Path, config: str, steps: int, write: str, *extra: str) -> list[str]:
    return [
        "train", "--config", config, "--nproc-per-node", "2", "--output-dir", str(output), "--max_steps", str(steps),
        "--per_device_train_batch_size", "8", "--logging_steps", "1", "--seed", "7", "--deterministic",
        "--config-overrides", NO_DROPOUT, "--save_steps", "4", "--checkpoint-write", write, *extra,
    ]  # fmt: skip


def files_of(checkpoint: Path) -> list[str]:
    return sorted(str(p.relative_to(checkpoint)) for p in checkpoint.rglob("*") if p.is_file())


def test_a_background_checkpoint_resumes_on_the_curve_of_a_foreground_one(tmp_path: Path, env):
    config = "zero2"
    background = tmp_path / "background"
    result = run_zerokit(train_argv(background, config, 8, "background"), env)
    assert result.returncode == 0, result.stderr[-3000:]
    assert not list(background.glob("tmp-*")) and damage(background / "checkpoint-4") is None

    resumed = tmp_path / "foreground"
    result = run_zerokit(train_argv(resumed, config, 8, "sync", "--resume", str(background / "checkpoint-4")), env)
    assert result.returncode == 0, result.stderr[-3000:]
    expected, got = logged_losses(background), logged_losses(resumed)
    assert len(expected) == len(got) == 8
    assert got == pytest.approx(expected, rel=1e-6, abs=1e-6), list(zip(got, expected, strict=True))

    # The same checkpoint written both ways: the same files (the Trainer's own too), the same weights.
    written_behind, written_in_front = background / "checkpoint-8", resumed / "checkpoint-8"
    assert files_of(written_behind) == files_of(written_in_front)
    trainers = {"trainer_state.json", "rng_state_0.pth", "rng_state_1.pth", "latest", "config.json", "tokenizer.json",
                "training_args.bin", "zerokit-run.json", "zerokit-checkpoint.json"}  # fmt: skip
    assert trainers <= set(files_of(written_behind))
    behind = load_file(written_behind / "model.safetensors")
    in_front = load_file(written_in_front / "model.safetensors")
    assert behind.keys() == in_front.keys()
    for name, tensor in behind.items():
        torch.testing.assert_close(tensor, in_front[name], rtol=1e-6, atol=1e-6)


def partial_files(output: Path) -> list[str]:
    """The half-written files of the checkpoints being written; none at a look that a publication (the staging
    folder renamed, a partial file renamed whole) cut short: the next look sees them."""
    try:
        return sorted(p.name for p in output.glob(f"tmp-checkpoint-*/**/*{PARTIAL_SUFFIX}") if p.stat().st_size > 0)
    except FileNotFoundError:
        return []


def test_the_writers_killed_mid_file_on_two_ranks_leave_the_last_whole_checkpoint(tmp_path: Path, env):
    output = tmp_path / "run"
    argv = train_argv(output, "zero2", 12, "background")
    paced = {**env, PAUSE_VARIABLE: "0.02"}  # 20 ms per 64 KiB: each optimizer shard takes about a second
    proc = subprocess.Popen(
        [sys.executable, "-m", "zerokit", *argv], env=paced, cwd=REPO,
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True,
    )  # fmt: skip
    seen: list[str] = []
    deadline = time.monotonic() + 240
    try:
        while time.monotonic() < deadline and proc.poll() is None:
            partial = partial_files(output)
            rank1 = any(name.startswith("zero_pp_rank_1_") for name in partial)
            rank0 = any(name.startswith(("zero_pp_rank_0_", "mp_rank_00_")) for name in partial)
            if newest_complete_checkpoint(output) == output / "checkpoint-4" and rank0 and rank1:
                os.killpg(proc.pid, signal.SIGKILL)  # both ranks, their writer threads half way through a file
                seen = partial
                break
            time.sleep(0.005)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    assert seen, f"no write of both ranks was seen half way: {sorted(p.name for p in output.iterdir())}"
    left = sorted(p.name for p in output.iterdir())
    assert "tmp-checkpoint-8" in left and "checkpoint-8" not in left, left
    assert partial_files(output), left  # the half-written files are there, never published
    assert newest_complete_checkpoint(output) == output / "checkpoint-4" and damage(output / "checkpoint-4") is None

    result = run_zerokit([*argv, "--resume", "auto"], env)
    assert result.returncode == 0, result.stderr[-3000:]
    assert f"zerokit: resuming from {output / 'checkpoint-4'}" in result.stdout
    assert not list(output.glob("tmp-*")), sorted(p.name for p in output.iterdir())
    assert [p.name for p in sorted(output.glob("checkpoint-*"))] == ["checkpoint-12", "checkpoint-4", "checkpoint-8"]
    assert all(damage(output / f"checkpoint-{step}") is None for step in (4, 8, 12))
