"""Faults during and around a real `train` (DeepSpeed ZeRO-2, one CPU rank, the embedded job):
each run ends non-zero within a bound with one line naming the cause, and no file that is not
the run's own is lost. Mounts (read-only, a full tmpfs) need root: skipped otherwise, saying so.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.conftest import REPO, isolated_env, run_zerokit
from zerokit.outputs.checkpoints import newest_complete_checkpoint
from zerokit.outputs.ownership import LOCK_NAME, RECORD_NAME, contents

needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="mounts a read-only bind or a tmpfs: needs root")
QUICK = ["--config", "zero2", "--max_steps", "4", "--logging_steps", "1", "--per_device_train_batch_size", "8"]
SAVING = ["--save_strategy", "steps", "--save_steps", "2"]


@pytest.fixture(scope="module")
def env(tmp_path_factory) -> dict[str, str]:
    return isolated_env(tmp_path_factory.mktemp("env"))


@pytest.fixture(scope="module")
def finished_run(tmp_path_factory, env) -> Path:
    """A finished 4-step run with checkpoint-2 and checkpoint-4, copied by the tests that change it."""
    out = tmp_path_factory.mktemp("finished") / "run"
    result = run_zerokit(["train", "--output-dir", str(out), *QUICK, *SAVING], env)
    assert result.returncode == 0, result.stderr[-3000:]
    return out


def copy_of(run: Path, where: Path) -> Path:
    shutil.copytree(run, where, symlinks=True)
    return where


def digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def error_lines(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if line.startswith("error: ")]


def test_resume_auto_never_replaces_a_finished_model(finished_run: Path, tmp_path: Path, env):
    """Case 1: a finished run without checkpoints, `--resume auto` must not retrain over it."""
    run = copy_of(finished_run, tmp_path / "d")
    for checkpoint in run.glob("checkpoint-*"):
        shutil.rmtree(checkpoint)
    before = {p.name: digest(p) for p in run.iterdir() if p.is_file()}
    for legacy in (False, True):  # with zerokit's record, and a folder from before it (no record)
        if legacy:
            (run / RECORD_NAME).unlink()
            before.pop(RECORD_NAME)
        result = run_zerokit(["train", "--output-dir", str(run), *QUICK, "--max_steps", "2", "--resume", "auto"], env)
        assert result.returncode == 2, result.stderr[-2000:]
        assert len(error_lines(result.stderr)) == 1 and "holds a finished run" in result.stderr
        assert {p.name: digest(p) for p in run.iterdir() if p.is_file()} == before


def test_overwrite_replaces_the_earlier_run_but_keeps_user_files(finished_run: Path, tmp_path: Path, env):
    """Case 3: the earlier run's checkpoint-4 is removed, so rotation keeps this run's checkpoint. An --overwrite
    refused at its data's check (after the folder's lock, before the folder is claimed) removes nothing."""
    run = copy_of(finished_run, tmp_path / "rot")
    (run / "notes.txt").write_text("mine")
    argv = ["train", "--output-dir", str(run), *QUICK, "--max_steps", "1", "--save_strategy", "steps"]
    before = {name: stat for name, stat in contents(run).items() if name != LOCK_NAME}  # the lock names its holder
    refused = ["--overwrite", "--dataloader_drop_last", "true", "--per_device_eval_batch_size", "100000"]
    result = run_zerokit([*argv, *refused], env)
    assert result.returncode == 2 and "the validation split has" in result.stderr, result.stderr[-3000:]
    assert {name: stat for name, stat in contents(run).items() if name != LOCK_NAME} == before
    result = run_zerokit([*argv, "--save_steps", "1", "--save_total_limit", "1", "--overwrite"], env)
    assert result.returncode == 0, result.stderr[-3000:]
    assert sorted(p.name for p in run.glob("checkpoint-*")) == ["checkpoint-1"]
    assert newest_complete_checkpoint(run) == run / "checkpoint-1"
    assert (run / "notes.txt").read_text() == "mine"
    assert json.loads((run / "trainer_state.json").read_text())["global_step"] == 1


def test_resume_auto_falls_back_from_a_damaged_checkpoint(finished_run: Path, tmp_path: Path, env):
    """Case 9: a truncated optimizer shard in the newest checkpoint: resume from the one before, saying so."""
    run = copy_of(finished_run, tmp_path / "c")
    shard = next((run / "checkpoint-4").rglob("*optim_states.pt"))
    size = shard.stat().st_size
    shard.write_bytes(shard.read_bytes()[: size // 2])
    result = run_zerokit(["train", "--output-dir", str(run), *QUICK, "--max_steps", "6", "--resume", "auto"], env)
    assert result.returncode == 0, result.stderr[-3000:]
    written = f"{shard} has {size // 2} bytes, {size} were written"
    assert f"checkpoint {run / 'checkpoint-4'} is damaged ({written}" in result.stderr, result.stderr[-3000:]
    assert f"zerokit: resuming from {run / 'checkpoint-2'}" in result.stdout
    assert json.loads((run / "trainer_state.json").read_text())["global_step"] == 6


def test_a_diverged_run_stops_before_saving_and_exits_non_zero(tmp_path: Path, env):
    """Case 5: NaN losses end the run with one line; the diverged weights are never written."""
    run = tmp_path / "diverged"
    argv = ["train", "--output-dir", str(run), *QUICK, "--max_steps", "30", "--learning_rate", "1e6"]
    result = run_zerokit([*argv, "--warmup_steps", "0", "--save_strategy", "steps", "--save_steps", "1"], env)
    assert result.returncode == 1, result.stderr[-3000:]
    lines = error_lines(result.stderr)
    assert len(lines) == 1 and "training diverged: " in lines[0], result.stderr[-3000:]
    assert "became NaN or inf" in lines[0]
    assert "--learning_rate" in lines[0] and "Traceback" not in result.stderr
    assert not (run / "model.safetensors").exists()
    for checkpoint in run.glob("checkpoint-*"):  # whatever was saved was saved before the loss went bad
        losses = [e["loss"] for e in json.loads((checkpoint / "trainer_state.json").read_text())["log_history"]]
        assert all(loss == loss and abs(loss) != float("inf") for loss in losses)


@needs_root
def test_a_read_only_output_is_refused_before_any_rank_starts(tmp_path: Path, env):
    """Case 4: found at once, not after the training."""
    parent = tmp_path / "ro"
    parent.mkdir()
    subprocess.run(["mount", "--bind", str(parent), str(parent)], check=True)
    try:
        subprocess.run(["mount", "-o", "remount,bind,ro", str(parent)], check=True)
        started = time.monotonic()
        result = run_zerokit(["train", "--output-dir", str(parent / "run"), *QUICK], env)
        elapsed = time.monotonic() - started
    finally:
        subprocess.run(["umount", str(parent)], check=True)
    assert result.returncode == 2 and len(error_lines(result.stderr)) == 1, result.stderr[-2000:]
    assert "not writable (a read-only file system)" in result.stderr
    assert elapsed < 60  # before torch, DeepSpeed and the model: a bound, not a benchmark


@needs_root
def test_a_full_disk_while_checkpointing_is_named_and_the_last_checkpoint_survives(
    finished_run: Path, tmp_path: Path, env
):
    """Case 8: a tmpfs that holds the first checkpoint but not the second (sized on the finished run's)."""
    disk = tmp_path / "disk"
    disk.mkdir()
    one_checkpoint = sum(p.stat().st_size for p in (finished_run / "checkpoint-2").rglob("*") if p.is_file())
    size_kib = int(one_checkpoint * 1.6) // 1024
    subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size_kib}k", "tmpfs", str(disk)], check=True)
    try:
        (disk / "keep.txt").write_text("mine")
        result = run_zerokit(["train", "--output-dir", str(disk / "run"), *QUICK, *SAVING], env)
        survivors = sorted(p.name for p in (disk / "run").glob("checkpoint-*"))
        kept = (disk / "keep.txt").read_text()
    finally:
        subprocess.run(["umount", str(disk)], check=True)
    assert result.returncode == 1, result.stderr[-3000:]
    lines = error_lines(result.stderr)
    assert len(lines) == 1 and "no space left on the file system" in lines[0], result.stderr[-3000:]
    assert "checkpoint-2, is intact" in lines[0] and "Traceback" not in result.stderr
    assert survivors == ["checkpoint-2"] and kept == "mine"


def test_a_second_training_into_the_same_folder_fails_at_once(tmp_path: Path, env):
    """A job submitted twice, or ranks that each started alone: the second run refuses, the first goes on."""
    run = tmp_path / "shared"
    first = subprocess.Popen(
        [sys.executable, "-m", "zerokit", "train", "--output-dir", str(run), *QUICK, "--max_steps", "400"],
        env=env, cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 120
        while not (run / RECORD_NAME).is_file() and time.monotonic() < deadline and first.poll() is None:
            time.sleep(0.2)
        assert first.poll() is None, "the first run ended early"
        result = run_zerokit(["train", "--output-dir", str(run), *QUICK, "--resume", "auto"], env)
        assert first.poll() is None  # untouched by the second
    finally:
        first.kill()
        first.wait()
    assert result.returncode == 2, result.stderr[-2000:]
    lines = error_lines(result.stderr)
    assert len(lines) == 1 and f"output folder {run} is being written by another run (train, pid" in lines[0]


def test_generate_reads_what_training_leaves(finished_run: Path, tmp_path: Path, env):
    """A run stopped before its final save (its newest whole checkpoint) and a checkpoint holding only ZeRO
    shards (consolidated in memory) give the tokens of the checkpoint's own weights; a folder with a config
    and nothing to load is refused in one line."""
    prompt = ["--prompt", "the old", "--max-new-tokens", "6"]
    expected = run_zerokit(["generate", str(finished_run / "checkpoint-4"), *prompt], env)
    assert expected.returncode == 0, expected.stderr[-3000:]

    run = copy_of(finished_run, tmp_path / "stopped")
    (run / "model.safetensors").unlink()  # stopped after checkpoint-4, before the final save
    result = run_zerokit(["generate", str(run), *prompt], env)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "has no final weights (the run stopped before its final save): using its newest whole checkpoint, " \
        "checkpoint-4" in result.stderr  # fmt: skip
    assert result.stdout == expected.stdout

    (run / "checkpoint-4" / "model.safetensors").unlink()  # the DeepSpeed shards alone
    result = run_zerokit(["generate", str(run / "checkpoint-4"), *prompt], env)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "holds ZeRO shards only: consolidating them in memory" in result.stderr
    assert result.stdout == expected.stdout

    bare = tmp_path / "bare"
    bare.mkdir()
    for name in ("config.json", "tokenizer.json", "tokenizer_config.json"):
        shutil.copy(finished_run / name, bare / name)
    result = run_zerokit(["generate", str(bare), *prompt], env)
    assert result.returncode == 2 and error_lines(result.stderr) == [
        f"error: {bare} has a config but no weights (model.safetensors) and no checkpoint-N: give a folder whose "
        "run finished, or one of its checkpoint-N folders"
    ], result.stderr[-2000:]


def test_resume_auto_never_starts_over_a_run_whose_checkpoints_are_all_damaged(finished_run: Path, tmp_path, env):
    """Every checkpoint damaged: refused in one line naming them and the choices; nothing of the run changes."""
    run = copy_of(finished_run, tmp_path / "all-damaged")
    (run / "model.safetensors").unlink()  # a run stopped before its final save
    for shard in run.rglob("*optim_states.pt"):
        shard.write_bytes(shard.read_bytes()[:100])
    before = {p: digest(p) for p in run.rglob("*") if p.is_file()}
    result = run_zerokit(["train", "--output-dir", str(run), *QUICK, "--max_steps", "6", "--resume", "auto"], env)
    assert result.returncode == 2, result.stderr[-3000:]
    assert error_lines(result.stderr) == [
        f"error: --resume auto: every checkpoint of {run} is damaged (checkpoint-4, checkpoint-2), so nothing was "
        "started over it: resume from a whole copy with --resume PATH, or start again with --overwrite"
    ], result.stderr[-3000:]
    assert {p: digest(p) for p in run.rglob("*") if p.is_file()} == before
