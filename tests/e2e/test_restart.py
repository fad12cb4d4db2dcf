"""launch --max-restarts on one node: a rank of a 2-rank ZeRO-2 train SIGKILLed after its first checkpoint; the
job restarts from that checkpoint (train with --resume auto) and finishes: exit 0, the model written, the run
record naming the fault, the restart and what it cost, and the steps after it continuing from the checkpoint."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from tests.conftest import REPO, default_stop_signals
from zerokit.outputs.checkpoints import newest_complete_checkpoint

STEPS = 12


def rank_pid(launch: int, rank: str) -> int | None:
    """The pid of launch's child that is that rank (its RANK variable), if it runs."""
    for entry in Path("/proc").iterdir():
        try:
            if not entry.name.isdigit() or int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1]) != launch:
                continue
            if f"RANK={rank}".encode() in (entry / "environ").read_bytes().split(b"\0"):
                return int(entry.name)
        except (OSError, IndexError, ValueError):
            continue
    return None


def test_a_rank_killed_after_a_checkpoint_is_restarted_from_it_and_the_run_finishes(tmp_path: Path, zk_env):
    output = tmp_path / "run"
    argv = ["launch", "--nproc-per-node", "2", "--max-restarts", "1", "--stop-grace", "5", "--stall-timeout", "60"]
    argv += ["train", "--config", "zero2", "--output-dir", str(output), "--max_steps", str(STEPS)]
    argv += ["--save_steps", "4", "--logging_steps", "1", "--per_device_train_batch_size", "4", "--seed", "3"]
    err = tmp_path / "launch.err"
    with err.open("w") as stderr:
        proc = subprocess.Popen(
            [sys.executable, "-m", "zerokit", *argv],
            env=zk_env,
            cwd=REPO,
            stdout=subprocess.DEVNULL,
            stderr=stderr,
            preexec_fn=default_stop_signals,
        )
        deadline = time.monotonic() + 240
        while newest_complete_checkpoint(output) is None and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.05)
        victim = rank_pid(proc.pid, "1")
        assert victim is not None, err.read_text()[-3000:]
        os.kill(victim, signal.SIGKILL)
        killed_at = time.time()
        code = proc.wait(timeout=240)
    text = err.read_text(errors="replace")
    assert code == 0, text[-4000:]
    assert "launch: rank 1 (local 1) was killed by SIGKILL (exit 137): a machine fault; restart 1 of 1, from " in text
    assert (output / "model.safetensors").is_file()

    record = json.loads((output / "zerokit-run.json").read_text())
    (event,) = record["restarts"]
    assert (event["rank"], event["exit"], event["restart"], event["cause"]) == (
        "1",
        137,
        1,
        "was killed by SIGKILL (exit 137)",
    )
    resumed = Path(record["resumed_from"][0]["checkpoint"])
    assert event["resumes_from"] == str(output / resumed.name)
    step = record["resumed_from"][0]["step"]
    assert step % 4 == 0 and step < STEPS
    # What the fault cost: the steps past the checkpoint trained again (at most the save interval), and the time
    # from the last step before it to the first after it.
    assert event["steps_lost"] == event["reached_step"] - step and 0 <= event["steps_lost"] <= 4, event
    assert 0 < event["seconds_to_first_step"] < 120, event
    history = json.loads((output / "trainer_state.json").read_text())["log_history"]
    assert [e["step"] for e in history if "loss" in e] == list(range(1, STEPS + 1))  # the checkpoint's, then on
    first_after = (output / f"checkpoint-{step + 4}").stat().st_mtime if step + 4 < STEPS else None
    print(f"restart: resumed from step {step}; checkpoint {step + 4} written {first_after and first_after - killed_at}")
