"""Which checkpoint `--resume` picks, and the world-size check (folders laid out as the Trainer writes them)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.conftest import run_zerokit
from zerokit.checkpoints import needs_universal_load, newest_complete_checkpoint, publish, resolve_resume
from zerokit.errors import UserError


def checkpoint(folder: Path, name: str, ranks: int = 2, complete: bool = True) -> Path:
    path = folder / name
    path.mkdir(parents=True)
    for rank in range(ranks):
        (path / f"rng_state_{rank}.pth").write_text("")
    if complete:
        (path / "trainer_state.json").write_text("{}")
    return path


def test_newest_complete_checkpoint_skips_staging_and_incomplete_folders(tmp_path: Path):
    assert newest_complete_checkpoint(tmp_path / "missing") is None
    checkpoint(tmp_path, "checkpoint-9")
    newest = checkpoint(tmp_path, "checkpoint-10")
    checkpoint(tmp_path, "tmp-checkpoint-20", complete=True)
    checkpoint(tmp_path, "checkpoint-30", complete=False)  # written in place by something else, then a crash
    assert newest_complete_checkpoint(tmp_path) == newest
    assert resolve_resume("auto", tmp_path) == newest
    assert resolve_resume(None, tmp_path) is None
    assert resolve_resume("auto", tmp_path / "empty") is None


def test_resume_from_an_explicit_folder(tmp_path: Path):
    path = checkpoint(tmp_path, "checkpoint-5")
    assert resolve_resume(str(path), tmp_path) == path
    with pytest.raises(UserError, match="not a complete checkpoint"):
        resolve_resume(str(tmp_path / "checkpoint-6"), tmp_path)


def test_world_size_mismatch_names_the_ways_on(tmp_path: Path):
    path = checkpoint(tmp_path, "checkpoint-5", ranks=4)
    assert needs_universal_load(path, 4) is False
    ways = rf"written by 4 ranks, this run has 2.*Resume with 4 ranks.*`zerokit universal {path}`.*--model"
    with pytest.raises(UserError, match=ways):
        needs_universal_load(path, 2)
    assert needs_universal_load(checkpoint(tmp_path, "checkpoint-6", ranks=0), 1) is False  # one rng_state.pth
    (path / "latest_universal").write_text("global_step5_universal")  # converted: any rank count
    assert needs_universal_load(path, 2) is True and needs_universal_load(path, 4) is False


def test_publish_replaces_an_older_checkpoint_of_the_same_step(tmp_path: Path):
    old = checkpoint(tmp_path, "checkpoint-5")
    written = checkpoint(tmp_path / "tmp-checkpoint-5", "checkpoint-5", ranks=1)
    publish(written, old)
    assert sorted(p.name for p in old.iterdir()) == ["rng_state_0.pth", "trainer_state.json"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["checkpoint-5", "tmp-checkpoint-5"]


def test_universal_refuses_what_is_not_a_zero_checkpoint(tmp_path: Path, zk_env):
    result = run_zerokit(["universal", str(tmp_path / "checkpoint-9")], zk_env)
    assert result.returncode == 2 and "not a complete checkpoint" in result.stderr
    plain = checkpoint(tmp_path, "checkpoint-5", ranks=2)  # trainer state, no DeepSpeed `latest`
    result = run_zerokit(["universal", str(plain)], zk_env)
    assert result.returncode == 2 and "no DeepSpeed state" in result.stderr
    assert sorted(p.name for p in plain.iterdir()) == ["rng_state_0.pth", "rng_state_1.pth", "trainer_state.json"]
