"""Checkpoints are atomic: kill -9 while one is written, and `--resume auto` still picks the previous one.

Then: resuming with another number of ranks and a gradient accumulation that changes the global batch fails in
one line naming the one that keeps it, before the checkpoint is converted; with the same number it loads,
finishes, cleans the half-written folder and keeps save_total_limit checkpoints.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from tests.conftest import REPO, run_zerokit
from zerokit.outputs.checkpoints import newest_complete_checkpoint

STEPS = 30
SAVE_STEPS = 5


def train_argv(output: Path, ranks: int, *extra: str) -> list[str]:
    return [
        "train",
        "--config",
        "zero3",
        "--nproc-per-node",
        str(ranks),
        "--output-dir",
        str(output),
        "--max_steps",
        str(STEPS),
        "--per_device_train_batch_size",
        "8",
        "--save_strategy",
        "steps",
        "--save_steps",
        str(SAVE_STEPS),
        "--save_total_limit",
        "2",
        *extra,
    ]


def half_written(output: Path) -> list[Path]:
    """`tmp-checkpoint-N` folders whose `checkpoint-N` is not there yet: writes in progress (or cut off)."""
    return [p for p in sorted(output.glob("tmp-checkpoint-*")) if not (output / p.name.removeprefix("tmp-")).exists()]


def kill_at_sight(output: Path, env: dict[str, str], *extra: str) -> None:
    """Train; SIGKILL every process the moment a checkpoint exists and the next is being written."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "zerokit", *train_argv(output, 2, *extra)],
        env=env,
        cwd=REPO,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,  # its own process group: the launcher and both ranks
    )
    deadline = time.monotonic() + 300
    try:
        while time.monotonic() < deadline and proc.poll() is None:
            if newest_complete_checkpoint(output) and half_written(output):
                os.killpg(proc.pid, signal.SIGKILL)
                return
            time.sleep(0.002)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    raise AssertionError(f"no checkpoint write was seen in {output} (exit code {proc.returncode})")


def kill_during_a_checkpoint_write(output: Path, env: dict[str, str]) -> Path:
    """A run killed while it wrote a checkpoint; the half-written folder it left.

    Seeing the write and killing are two steps, and the saving rank may publish the checkpoint in
    between (CI saw it once): then the run resumes and is killed at its next write, up to 4 times.
    """
    for attempt in range(4):
        kill_at_sight(output, env, *(("--resume", "auto") if attempt else ()))
        if staging := half_written(output):
            return staging[0]
    raise AssertionError(f"each of 4 checkpoints was published before the kill landed: {sorted(output.iterdir())}")


def test_kill_9_during_a_checkpoint_write_then_resume_auto(tmp_path: Path, zk_env):
    output = tmp_path / "run"
    staging = kill_during_a_checkpoint_write(output, zk_env)
    half_step = int(staging.name.rsplit("-", 1)[1])
    previous = newest_complete_checkpoint(output)
    left = sorted(p.name for p in output.iterdir())
    assert staging.is_dir() and not (output / f"checkpoint-{half_step}").exists(), left
    assert previous == output / f"checkpoint-{half_step - SAVE_STEPS}", left

    # Another world size whose flags change the global batch (2 x 8 = 16): one line naming the accumulation
    # that keeps it, and the checkpoint left as it was (not converted).
    result = run_zerokit(train_argv(output, 1, "--resume", "auto", "--gradient_accumulation_steps", "1"), zk_env)
    assert result.returncode == 2, result.stderr[-3000:]
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and f"checkpoint {previous} was trained with 16" in lines[0], result.stderr[-3000:]
    assert "pass --gradient_accumulation_steps 2, or leave it out" in lines[0]
    assert not (previous / "latest_universal").exists()

    result = run_zerokit(train_argv(output, 2, "--resume", "auto"), zk_env)
    assert result.returncode == 0, result.stderr[-3000:]
    assert f"zerokit: resuming from {previous}" in result.stdout
    assert not list(output.glob("tmp-*")), sorted(p.name for p in output.iterdir())
    assert sorted(p.name for p in output.glob("checkpoint-*")) == [
        f"checkpoint-{STEPS - SAVE_STEPS}",
        f"checkpoint-{STEPS}",
    ]
    assert (output / "model.safetensors").is_file()
