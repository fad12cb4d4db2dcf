"""Output folders: `--overwrite` removes only what an earlier run wrote; the user's files stay."""

from __future__ import annotations

from pathlib import Path

import pytest

from zerokit.foundations.errors import UserError
from zerokit.training import outputs


def write(path: Path, text: str = "x") -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def test_overwrite_removes_what_the_earlier_run_wrote_and_keeps_the_rest(tmp_path: Path):
    notes = write(tmp_path / "notes.txt", "mine")
    record = outputs.begin(tmp_path, "train", replace=False)
    write(tmp_path / "model.safetensors")
    write(tmp_path / "checkpoint-2" / "trainer_state.json", "{}")
    outputs.finish(tmp_path, record)
    assert outputs.read_record(tmp_path).owned == ["checkpoint-2", "model.safetensors"]
    later = write(tmp_path / "added-after.txt")  # the user's, written after the run finished

    outputs.begin(tmp_path, "train", replace=True)
    assert sorted(outputs.entries(tmp_path)) == ["added-after.txt", "notes.txt"]
    assert notes.read_text() == "mine" and later.is_file()


def test_an_unfinished_run_owns_everything_but_what_was_there_before(tmp_path: Path):
    write(tmp_path / "corpus.txt")
    outputs.begin(tmp_path, "bench", replace=False)
    write(tmp_path / "runs" / "r1" / "log")  # then the run was killed: no list of what it wrote
    outputs.begin(tmp_path, "bench", replace=True)
    assert outputs.entries(tmp_path) == {"corpus.txt"}


def test_a_resumed_run_keeps_the_foreign_list(tmp_path: Path):
    write(tmp_path / "checkpoint-9" / "trainer_state.json", "{}")
    outputs.begin(tmp_path, "train", replace=False)
    write(tmp_path / "checkpoint-1" / "trainer_state.json", "{}")
    record = outputs.begin(tmp_path, "train", replace=False)  # --resume: the same chain
    assert record.foreign == ["checkpoint-9"] and not record.finished


def test_damaged_record_is_one_line(tmp_path: Path):
    write(tmp_path / outputs.RECORD_NAME, "{not json")
    with pytest.raises(UserError, match=r"is damaged.*remove it"):
        outputs.read_record(tmp_path)


def test_a_second_run_into_a_locked_folder_fails_at_once(tmp_path: Path):
    """The lock is the kernel's (flock): held by another process here, refused with who holds it."""
    import subprocess
    import sys

    holder = subprocess.Popen(
        [sys.executable, "-c", "import sys, time; from zerokit import outputs; "
         f"outputs.hold_lock(__import__('pathlib').Path({str(tmp_path)!r}), 'train'); print('held', flush=True); "
         "time.sleep(60)"],
        stdout=subprocess.PIPE, text=True, env={"PYTHONPATH": str(Path(outputs.__file__).parents[1])},
    )  # fmt: skip
    try:
        assert holder.stdout.readline().strip() == "held"
        with pytest.raises(UserError, match=rf"being written by another run \(train, pid {holder.pid} on "):
            outputs.hold_lock(tmp_path, "train")
    finally:
        holder.kill()
        holder.wait()
    outputs.hold_lock(tmp_path, "train")  # released with the process that held it
    assert outputs.entries(tmp_path) == set()  # the lock file is not a run's output
