"""Preemption: SIGTERM, then Ctrl-C, to a 2-rank ZeRO-3 run, then Ctrl-C twice; `--resume auto` after each;
the same losses as without.

The signal goes to the local launcher (as Slurm's goes to the batch shell, or a terminal's Ctrl-C to the
foreground command), which forwards it to the ranks; train checkpoints at the step end and exits with the
requeue code (SIGTERM) or 130 (SIGINT), in one line; a second SIGINT ends it at once, without a checkpoint.
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

from tests.conftest import REPO, default_stop_signals, run_zerokit
from zerokit.outputs.checkpoints import newest_complete_checkpoint
from zerokit.train.callbacks.preemption import INTERRUPT_EXIT_CODE, REQUEUE_EXIT_CODE

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


def progress(log: Path, total: int = STEPS) -> int:
    """The highest step rank 0's progress bar (of `total` steps) has shown."""
    steps = re.findall(rf"(\d+)/{total} \[", log.read_text(errors="replace")) if log.exists() else []
    return max(map(int, steps), default=0)


def interrupt_at(step: int, output: Path, env: dict[str, str], tmp: Path, *signals: int) -> tuple[int, str]:
    """Start `train --resume auto`, send the launcher `signals` once `step` shows; (exit code, its stderr)."""
    return interrupted(train_argv(output, "--resume", "auto"), STEPS, step, env, tmp, *signals)


def interrupted(argv: list[str], total: int, step: int, env: dict[str, str], tmp: Path, *signals: int):
    """Start `zerokit ARGV` (a train of `total` steps), send the launcher `signals` once `step` shows; (exit
    code, its stderr)."""
    err = tmp / f"interrupt-{step}.err"
    with err.open("w") as stderr:
        proc = subprocess.Popen(
            [sys.executable, "-m", "zerokit", *argv],
            env=env,
            cwd=REPO,
            stdout=subprocess.DEVNULL,
            stderr=stderr,
            preexec_fn=default_stop_signals,  # a suite started in the background inherits SIGINT ignored
        )
        deadline = time.monotonic() + 300
        while progress(err, total) < step and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.05)
        for number in signals:
            proc.send_signal(number)
            time.sleep(0.2)
        code = proc.wait(timeout=300)
    return code, err.read_text(errors="replace")


def test_sigterm_at_two_steps_then_resume_auto_matches_an_uninterrupted_run(tmp_path: Path, zk_env):
    baseline = tmp_path / "baseline"
    result = run_zerokit(train_argv(baseline), zk_env)
    assert result.returncode == 0, result.stderr[-3000:]
    expected = losses_by_step(baseline)
    assert sorted(expected) == list(range(1, STEPS + 1))

    output = tmp_path / "preempted"
    # Stopped again after each resume: 8 steps apart, so each target lies beyond where the run before stopped.
    first = random.Random(20240).randrange(3, 7)
    targets = [first, first + 8, first + 16]
    stopped_at = []
    for target, signals, code_wanted in [
        (targets[0], [signal.SIGTERM], REQUEUE_EXIT_CODE),
        (targets[1], [signal.SIGINT], INTERRUPT_EXIT_CODE),
    ]:
        code, stderr = interrupt_at(target, output, zk_env, tmp_path, *signals)
        assert code == code_wanted, stderr[-3000:]
        name = signal.Signals(signals[0]).name
        step = int(re.search(rf"{name} received: checkpointing at step (\d+)", stderr).group(1))
        assert newest_complete_checkpoint(output) == output / f"checkpoint-{step}"
        assert not (output / "model.safetensors").exists()  # no final export after a preemption
        assert "Traceback" not in stderr, stderr[-3000:]
        stopped_at.append(step)
    assert len(set(stopped_at)) == 2 and stopped_at == sorted(stopped_at), stopped_at

    # Ctrl-C twice: the ranks end at once, in one line each, and no checkpoint of that run is taken for whole.
    code, stderr = interrupt_at(targets[2], output, zk_env, tmp_path, signal.SIGINT, signal.SIGINT)
    assert code == INTERRUPT_EXIT_CODE, stderr[-3000:]
    assert "SIGINT again: exiting now (130)" in stderr and "Traceback" not in stderr, stderr[-3000:]
    newest = newest_complete_checkpoint(output)
    stopped_at.append(int(newest.name.split("-")[1]))

    result = run_zerokit(train_argv(output, "--resume", "auto"), zk_env)
    assert result.returncode == 0, result.stderr[-3000:]
    assert f"zerokit: resuming from {output / f'checkpoint-{stopped_at[-1]}'}" in result.stdout
    # Every step, bit for bit: the same batches, learning rate, RNG and optimizer state after each resume.
    losses = losses_by_step(output)
    differing = {step: (losses.get(step), loss) for step, loss in expected.items() if losses.get(step) != loss}
    assert losses == expected, differing
    assert (output / "model.safetensors").is_file()
