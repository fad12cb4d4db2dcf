"""Output folders: `--overwrite` removes only what an earlier run wrote; the user's files stay."""

from __future__ import annotations

from pathlib import Path

import pytest

from zerokit.foundations.errors import UserError
from zerokit.outputs import ownership


def write(path: Path, text: str = "x") -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def test_overwrite_removes_what_the_earlier_run_wrote_and_keeps_the_rest(tmp_path: Path):
    notes = write(tmp_path / "notes.txt", "mine")
    record = ownership.begin(tmp_path, "train", replace=False)
    write(tmp_path / "model.safetensors")
    write(tmp_path / "checkpoint-2" / "trainer_state.json", "{}")
    ownership.finish(tmp_path, record)
    assert ownership.read_record(tmp_path).owned == ["checkpoint-2", "model.safetensors"]
    later = write(tmp_path / "added-after.txt")  # the user's, written after the run finished

    ownership.begin(tmp_path, "train", replace=True)
    assert sorted(ownership.entries(tmp_path)) == ["added-after.txt", "notes.txt"]
    assert notes.read_text() == "mine" and later.is_file()


def test_an_unfinished_run_owns_everything_but_what_was_there_before(tmp_path: Path):
    write(tmp_path / "corpus.txt")
    ownership.begin(tmp_path, "bench", replace=False)
    write(tmp_path / "runs" / "r1" / "log")  # then the run was killed: no list of what it wrote
    ownership.begin(tmp_path, "bench", replace=True)
    assert ownership.entries(tmp_path) == {"corpus.txt"}


def test_a_resumed_run_keeps_the_foreign_list(tmp_path: Path):
    write(tmp_path / "checkpoint-9" / "trainer_state.json", "{}")
    ownership.begin(tmp_path, "train", replace=False)
    write(tmp_path / "checkpoint-1" / "trainer_state.json", "{}")
    record = ownership.begin(tmp_path, "train", replace=False)  # --resume: the same chain
    assert record.foreign == ["checkpoint-9"] and not record.finished


def test_a_resumed_claim_leaves_the_record_as_the_last_run_wrote_it_until_the_run_has_started(tmp_path: Path):
    ownership.finish(tmp_path, ownership.begin(tmp_path, "train", replace=False))
    finished = (tmp_path / ownership.RECORD_NAME).read_bytes()
    record = ownership.begin(tmp_path, "train", replace=False)  # --resume: a run that may yet fail to load
    assert not record.finished and (tmp_path / ownership.RECORD_NAME).read_bytes() == finished
    ownership.started(tmp_path, record)
    assert not ownership.read_record(tmp_path).finished


def test_damaged_record_is_one_line(tmp_path: Path):
    write(tmp_path / ownership.RECORD_NAME, "{not json")
    with pytest.raises(UserError, match=r"is damaged.*remove it"):
        ownership.read_record(tmp_path)


def test_a_second_run_into_a_locked_folder_fails_at_once(tmp_path: Path):
    """The lock is the kernel's (flock): held by another process here, refused with who holds it."""
    import subprocess
    import sys

    holder = subprocess.Popen(
        [sys.executable, "-c", "import sys, time; from zerokit.outputs import ownership; "
         f"ownership.hold_lock(__import__('pathlib').Path({str(tmp_path)!r}), 'train'); print('held', flush=True); "
         "time.sleep(60)"],
        stdout=subprocess.PIPE, text=True, env={"PYTHONPATH": str(Path(ownership.__file__).parents[2])},
    )  # fmt: skip
    try:
        assert holder.stdout.readline().strip() == "held"
        with pytest.raises(UserError, match=rf"being written by another run \(train, pid {holder.pid} on "):
            ownership.hold_lock(tmp_path, "train")
    finally:
        holder.kill()
        holder.wait()
    ownership.hold_lock(tmp_path, "train")  # released with the process that held it
    assert ownership.entries(tmp_path) == set()  # the lock file is not a run's output


def test_an_output_built_beside_replaces_the_old_one_whole(tmp_path: Path):
    output = write(tmp_path / "blocks" / "data.arrow", "old").parent
    with ownership.built_beside(output, "prepare tokenize", "--output") as partial:
        write(partial / "data.arrow", "new")
        assert (output / "data.arrow").read_text() == "old"  # nobody sees half a result
    assert (output / "data.arrow").read_text() == "new"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["blocks"]  # no lock, partial or old copy left


def test_an_output_changed_meanwhile_is_not_replaced_and_nothing_is_lost(tmp_path: Path):
    output = write(tmp_path / "blocks" / "data.arrow", "old").parent
    changed = "changed while prepare tokenize ran, so it was not replaced"
    with (
        pytest.raises(UserError, match=changed) as caught,
        ownership.built_beside(output, "prepare tokenize", "--output") as partial,
    ):
        write(partial / "data.arrow", "new")
        write(output / "notes.txt", "mine")  # the user's, put there while the command ran
    assert (output / "notes.txt").read_text() == "mine" and (output / "data.arrow").read_text() == "old"
    assert str(partial) in str(caught.value) and (partial / "data.arrow").read_text() == "new"


def test_a_failed_build_leaves_nothing_beside_the_output(tmp_path: Path):
    output = tmp_path / "out.jsonl"
    with pytest.raises(RuntimeError), ownership.built_beside(output, "generate", "--output") as partial:
        write(partial, "half")
        raise RuntimeError("the model failed")
    assert list(tmp_path.iterdir()) == []


def test_a_process_that_ends_holding_a_folder_it_never_claimed_takes_away_what_it_made(tmp_path: Path):
    """hold_lock, then an exit before begin (a run refused at its data's check): the lock file and the folders it made
    go, a lock file that was there stays; after begin, what it made stays with the run."""
    import subprocess
    import sys

    def run(folder: Path, claim: bool) -> None:
        code = (
            "import pathlib; from zerokit.outputs import ownership; "
            f"folder = pathlib.Path({str(folder)!r}); ownership.hold_lock(folder, 'train'); "
            + ("ownership.begin(folder, 'train', replace=False); " if claim else "")
            + "raise SystemExit(2)"
        )
        env = {"PYTHONPATH": str(Path(ownership.__file__).parents[2])}
        assert subprocess.run([sys.executable, "-c", code], env=env).returncode == 2

    run(tmp_path / "new" / "run", claim=False)
    assert list(tmp_path.iterdir()) == []  # neither the run's folder nor its new parent
    mine = write(tmp_path / "mine" / "notes.txt", "mine").parent
    write(mine / ownership.LOCK_NAME, "an earlier run's")
    run(mine, claim=False)
    assert sorted(p.name for p in mine.iterdir()) == [ownership.LOCK_NAME, "notes.txt"]
    run(tmp_path / "claimed", claim=True)
    assert sorted(p.name for p in (tmp_path / "claimed").iterdir()) == sorted(
        [ownership.LOCK_NAME, ownership.RECORD_NAME]
    )


def test_a_build_beside_that_fails_leaves_no_folder_it_made(tmp_path: Path):
    output = tmp_path / "new" / "blocks"
    with pytest.raises(RuntimeError), ownership.built_beside(output, "prepare tokenize", "--output") as partial:
        write(partial / "data.arrow")
        raise RuntimeError("the tokenizer broke")
    assert list(tmp_path.iterdir()) == []
