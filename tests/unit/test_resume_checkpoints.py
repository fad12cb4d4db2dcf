"""Which checkpoint `--resume` picks, and the world-size check (folders laid out as the Trainer writes them)."""

from __future__ import annotations

import zipfile
from pathlib import Path

import pytest

from tests.conftest import run_zerokit
from zerokit.foundations.errors import UserError
from zerokit.outputs.checkpoints import (
    SIZES_NAME,
    damage,
    needs_universal_load,
    newest_complete_checkpoint,
    publish,
    record_sizes,
    resolve_resume,
    rotate,
)
from zerokit.outputs.ownership import begin


def torch_file(path: Path) -> Path:
    """A stand-in for a torch.save file: a zip archive, as torch writes (no tensor needed here)."""
    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr("archive/data.pkl", b"state")
    return path


def checkpoint(folder: Path, name: str, ranks: int = 2, complete: bool = True) -> Path:
    path = folder / name
    path.mkdir(parents=True)
    for rank in range(ranks):
        torch_file(path / f"rng_state_{rank}.pth")
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


def test_another_rank_count_loads_the_universal_form_of_a_zero_checkpoint_only(tmp_path: Path):
    path = checkpoint(tmp_path, "checkpoint-5", ranks=4)
    assert needs_universal_load(path, 4) is False
    ways = rf"written by 4 ranks without DeepSpeed .*this run has 2: resume with 4 ranks; .*--model {path}"
    with pytest.raises(UserError, match=ways):  # no ZeRO shards: nothing to convert
        needs_universal_load(path, 2)
    assert needs_universal_load(checkpoint(tmp_path, "checkpoint-6", ranks=0), 1) is False  # one rng_state.pth
    (path / "latest").write_text("global_step5")
    assert needs_universal_load(path, 2) is True  # train converts it (zerokit.train.checkpoints.resharded)
    (path / "global_step5_universal").mkdir()  # converted: ds_to_universal names the folder it wrote
    (path / "latest_universal").write_text("global_step5_universal")  # so: any rank count
    assert needs_universal_load(path, 2) is True and needs_universal_load(path, 4) is False


def test_a_checkpoint_of_another_tp_size_is_refused(tmp_path: Path):
    path = checkpoint(tmp_path, "checkpoint-5", ranks=2)
    (path / "latest").write_text("global_step5")
    (path / "global_step5").mkdir()
    for rank in (0, 1):  # DeepSpeed writes one model-states file per rank of a tensor-parallel group
        (path / "global_step5" / f"mp_rank_0{rank}_model_states.pt").write_bytes(b"")
    (path / "global_step5" / "zero_pp_rank_0_mp_rank_00_optim_states.pt").write_bytes(b"")
    assert needs_universal_load(path, 2, tp_size=2) is False
    with pytest.raises(UserError, match=r"written with --tp-size 2, this run has --tp-size 1.*Resume with --tp-size 2"):
        needs_universal_load(path, 2)
    (path / "global_step5_universal").mkdir()
    (path / "latest_universal").write_text("global_step5_universal")
    assert needs_universal_load(path, 2) is True and needs_universal_load(path, 1) is True  # converted: re-split


def test_publish_replaces_an_older_checkpoint_of_the_same_step(tmp_path: Path):
    old = checkpoint(tmp_path, "checkpoint-5")
    written = checkpoint(tmp_path / "tmp-checkpoint-5", "checkpoint-5", ranks=1)
    publish(written, old)
    assert sorted(p.name for p in old.iterdir()) == sorted(["rng_state_0.pth", SIZES_NAME, "trainer_state.json"])
    assert sorted(p.name for p in tmp_path.iterdir()) == ["checkpoint-5", "tmp-checkpoint-5"]


def test_universal_refuses_what_is_not_a_zero_checkpoint(tmp_path: Path, zk_env):
    result = run_zerokit(["universal", str(tmp_path / "checkpoint-9")], zk_env)
    assert result.returncode == 2 and "no such folder: give a checkpoint-N folder" in result.stderr
    assert "--resume" not in result.stderr
    plain = checkpoint(tmp_path, "checkpoint-5", ranks=2)  # trainer state, no DeepSpeed `latest`
    result = run_zerokit(["universal", str(plain)], zk_env)
    assert result.returncode == 2 and "no DeepSpeed state" in result.stderr
    assert sorted(p.name for p in plain.iterdir()) == ["rng_state_0.pth", "rng_state_1.pth", "trainer_state.json"]


def test_resume_auto_skips_a_damaged_newest_checkpoint_and_says_so(tmp_path: Path):
    older = checkpoint(tmp_path, "checkpoint-5")
    newest = checkpoint(tmp_path, "checkpoint-10")
    publish_sizes = newest / "global_step10" / "bf16_zero_pp_rank_0_mp_rank_00_optim_states.pt"
    publish_sizes.parent.mkdir()
    torch_file(publish_sizes)
    assert damage(newest) is None
    publish_sizes.write_bytes(publish_sizes.read_bytes()[:20])  # truncated: a copy cut short
    notes: list[str] = []
    assert resolve_resume("auto", tmp_path, notes) == older
    assert len(notes) == 1 and str(publish_sizes) in notes[0] and "truncated" in notes[0]
    with pytest.raises(UserError, match=r"damaged .*optim_states.pt.*--resume auto"):
        resolve_resume(str(newest), tmp_path)


def test_recorded_sizes_catch_a_missing_or_shortened_file(tmp_path: Path):
    written = checkpoint(tmp_path / "tmp-checkpoint-5", "checkpoint-5", ranks=1)
    (written / "latest").write_text("global_step5")
    final = tmp_path / "checkpoint-5"
    publish(written, final)
    assert damage(final) is None
    (final / "latest").write_text("global_step")  # a plain file: only its recorded size tells
    assert "latest has 11 bytes, 12 were written" in damage(final)
    (final / "latest").unlink()
    assert "latest is missing" in damage(final)


def test_truncated_safetensors_is_damaged(tmp_path: Path):
    import numpy as np
    from safetensors.numpy import save_file

    path = checkpoint(tmp_path, "checkpoint-3") / "model.safetensors"
    save_file({"w": np.zeros((64, 64), dtype=np.float32)}, str(path))
    assert damage(path.parent) is None
    path.write_bytes(path.read_bytes()[:-100])
    assert "model.safetensors is truncated" in damage(path.parent)


def test_an_earlier_runs_checkpoints_are_neither_resumed_nor_rotated(tmp_path: Path):
    earlier = checkpoint(tmp_path, "checkpoint-200")  # copied in, or left by a run without a record
    begin(tmp_path, "train", replace=False)  # this run's record: checkpoint-200 is foreign
    ours = [checkpoint(tmp_path, f"checkpoint-{step}") for step in (1, 2, 3)]
    assert resolve_resume("auto", tmp_path) == ours[-1]
    rotate(tmp_path, 1)
    assert sorted(p.name for p in tmp_path.glob("checkpoint-*")) == ["checkpoint-200", "checkpoint-3"]
    assert earlier.is_dir()


def test_rotation_keeps_the_best_checkpoint_as_the_trainer_does(tmp_path: Path):
    found = [checkpoint(tmp_path, f"checkpoint-{step}") for step in (1, 2, 3, 4)]
    rotate(tmp_path, 1, best=found[1])
    assert sorted(p.name for p in tmp_path.glob("checkpoint-*")) == ["checkpoint-2", "checkpoint-4"]


def test_rotation_never_removes_a_damaged_checkpoint(tmp_path: Path):
    """Its steps may exist nowhere else: the user rescues it (or removes it); rotation keeps the newest whole ones."""
    found = [checkpoint(tmp_path, f"checkpoint-{step}") for step in (1, 2, 3)]
    for path in found:
        record_sizes(path)  # as zerokit does before publishing each checkpoint
    (found[0] / "rng_state_1.pth").unlink()  # e.g. a file lost on a parallel file system
    rotate(tmp_path, 1)
    assert sorted(p.name for p in tmp_path.glob("checkpoint-*")) == ["checkpoint-1", "checkpoint-3"]
