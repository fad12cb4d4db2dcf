"""Checkpoints are atomic: kill -9 while one is written, and `--resume auto` still picks the previous one.

Then: resuming with another number of ranks fails in one line with a supported path, and with the
same number it loads, finishes, cleans the half-written folder and keeps save_total_limit checkpoints.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from tests.conftest import REPO, run_zerokit
from zerokit.training.checkpoints import newest_complete_checkpoint

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


def group_members(pgid: int) -> list[Path]:
    """The /proc folders of the processes in process group `pgid`."""
    members = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue  # it exited
        if int(fields[2]) == pgid:
            members.append(stat.parent)
    return members


def freeze(pgid: int) -> None:
    """SIGSTOP the group and wait until every member has stopped, so the folder no longer changes."""
    os.killpg(pgid, signal.SIGSTOP)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        states = []
        for member in group_members(pgid):
            try:
                states.append((member / "stat").read_text().rsplit(")", 1)[1].split()[0])
            except OSError:
                continue
        if all(state in "TtZX" for state in states):
            return
        time.sleep(0.005)
    raise AssertionError(f"process group {pgid} did not stop within 10 s")


def kill_during_a_checkpoint_write(output: Path, env: dict[str, str]) -> Path:
    """Start training; SIGKILL every process once a checkpoint exists and the next is being written.

    Seeing `tmp-checkpoint-N` and killing are two steps: the saving rank may publish it in between.
    So the group is frozen first, the folder looked at again, and killed only while the write is
    still half done; else it goes on to the next checkpoint.
    """
    proc = subprocess.Popen(
        [sys.executable, "-m", "zerokit", *train_argv(output, 2)],
        env=env,
        cwd=REPO,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,  # its own process group: the launcher and both ranks
    )
    deadline = time.monotonic() + 300
    try:
        while time.monotonic() < deadline and proc.poll() is None:
            if newest_complete_checkpoint(output) and list(output.glob("tmp-checkpoint-*")):
                freeze(proc.pid)
                staging = sorted(output.glob("tmp-checkpoint-*"))
                half_written = [s for s in staging if not (output / s.name.removeprefix("tmp-")).exists()]
                if half_written:
                    os.killpg(proc.pid, signal.SIGKILL)
                    return half_written[0]
                os.killpg(proc.pid, signal.SIGCONT)
            time.sleep(0.002)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    raise AssertionError(f"no checkpoint write was seen in {output} (exit code {proc.returncode})")


def test_kill_9_during_a_checkpoint_write_then_resume_auto(tmp_path: Path, zk_env):
    output = tmp_path / "run"
    staging = kill_during_a_checkpoint_write(output, zk_env)
    half_step = int(staging.name.rsplit("-", 1)[1])
    previous = newest_complete_checkpoint(output)
    assert staging.is_dir() and not (output / f"checkpoint-{half_step}").exists()
    assert previous == output / f"checkpoint-{half_step - SAVE_STEPS}"

    # Another world size: one line, naming the supported ways on.
    result = run_zerokit(train_argv(output, 1, "--resume", "auto"), zk_env)
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "written by 2 ranks, this run has 1" in lines[0], result.stderr[-3000:]
    assert "Resume with 2 ranks" in lines[0] and f"--model {previous}" in lines[0]
    assert f"`zerokit universal {previous}`" in lines[0]

    result = run_zerokit(train_argv(output, 2, "--resume", "auto"), zk_env)
    assert result.returncode == 0, result.stderr[-3000:]
    assert f"zerokit: resuming from {previous}" in result.stdout
    assert not list(output.glob("tmp-*"))
    assert sorted(p.name for p in output.glob("checkpoint-*")) == [
        f"checkpoint-{STEPS - SAVE_STEPS}",
        f"checkpoint-{STEPS}",
    ]
    assert (output / "model.safetensors").is_file()
