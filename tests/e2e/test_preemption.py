"""Preemption: SIGTERM to a 2-rank ZeRO-3 run at two steps, `--resume auto` after each; same losses as without.

The signal goes to the local launcher (as Slurm's goes to the batch shell), which forwards it to
the ranks; each time train checkpoints at the step end and exits with the requeue code.
"""

from __future__ import annotations

import json
import random
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

from tests.conftest import REPO, run_zerokit
from zerokit.checkpoints import newest_complete_checkpoint
from zerokit.preemption import REQUEUE_EXIT_CODE

STEPS = 30


def train_argv(output: Path, *extra: str) -> list[str]:
    return [
        "train",
        "--config",
        "zero3",
        "--nproc-per-node",
        "2",
        "--output-dir",
        str(output),
        "--max_steps",
        str(STEPS),
        "--logging_steps",
        "1",  # every step, so the curves are compared everywhere
        "--per_device_train_batch_size",
        "8",
        "--seed",
        "7",
        "--deterministic",  # on CPU this runs AdamW in torch, whose bias correction survives a resume exactly
        *extra,
    ]


def losses_by_step(output: Path) -> dict[int, float]:
    history = json.loads((output / "trainer_state.json").read_text())["log_history"]
    return {entry["step"]: entry["loss"] for entry in history if "loss" in entry}


def progress(log: Path) -> int:
    """The highest step rank 0's progress bar has shown."""
    steps = re.findall(rf"(\d+)/{STEPS} \[", log.read_text(errors="replace")) if log.exists() else []
    return max(map(int, steps), default=0)


def interrupt_at(step: int, output: Path, env: dict[str, str], tmp: Path) -> tuple[int, str]:
    """Start `train --resume auto`, SIGTERM the launcher once `step` shows; (exit code, its stderr)."""
    err = tmp / f"interrupt-{step}.err"
    with err.open("w") as stderr:
        proc = subprocess.Popen(
            [sys.executable, "-m", "zerokit", *train_argv(output, "--resume", "auto")],
            env=env,
            cwd=REPO,
            stdout=subprocess.DEVNULL,
            stderr=stderr,
        )
        deadline = time.monotonic() + 300
        while progress(err) < step and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.05)
        proc.send_signal(signal.SIGTERM)
        code = proc.wait(timeout=300)
    return code, err.read_text(errors="replace")


def test_sigterm_at_two_steps_then_resume_auto_matches_an_uninterrupted_run(tmp_path: Path, zk_env):
    baseline = tmp_path / "baseline"
    result = run_zerokit(train_argv(baseline), zk_env)
    assert result.returncode == 0, result.stderr[-3000:]
    expected = losses_by_step(baseline)
    assert sorted(expected) == list(range(1, STEPS + 1))

    output = tmp_path / "preempted"
    targets = sorted(random.Random(20240).sample(range(3, STEPS - 4), 2))  # preempted again after a resume
    stopped_at = []
    for target in targets:
        code, stderr = interrupt_at(target, output, zk_env, tmp_path)
        assert code == REQUEUE_EXIT_CODE, stderr[-3000:]
        step = int(re.search(r"SIGTERM received: checkpointing at step (\d+)", stderr).group(1))
        assert newest_complete_checkpoint(output) == output / f"checkpoint-{step}"
        assert not (output / "model.safetensors").exists()  # no final export after a preemption
        stopped_at.append(step)
    assert len(set(stopped_at)) == 2 and stopped_at == sorted(stopped_at), stopped_at

    result = run_zerokit(train_argv(output, "--resume", "auto"), zk_env)
    assert result.returncode == 0, result.stderr[-3000:]
    assert f"zerokit: resuming from {output / f'checkpoint-{stopped_at[-1]}'}" in result.stdout
    # Every step, bit for bit: the same batches, learning rate, RNG and optimizer state after each resume.
    losses = losses_by_step(output)
    differing = {step: (losses.get(step), loss) for step, loss in expected.items() if losses.get(step) != loss}
    assert losses == expected, differing
    assert (output / "model.safetensors").is_file()
