"""The global batch a checkpoint records and a resume on another number of data-parallel ranks keeps: the
accumulation that keeps it, the one-line refusals naming the sizes that would, and a checkpoint without it."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest

from zerokit.foundations.errors import UserError
from zerokit.image.provenance import RECORD_NAME
from zerokit.train.callbacks.run_record import RunRecorder, write_record
from zerokit.train.options import TrainFlags
from zerokit.train.sizing.global_batch import GlobalBatch, accumulation_for, kept_accumulation, saved_batch

CHECKPOINT = Path("runs/x/checkpoint-10")


def recorded(tmp_path: Path, micro: int, accumulation: int, data_parallel: int) -> Path:
    """A checkpoint whose zerokit-run.json RunRecorder wrote for a run of micro x accumulation on data_parallel."""
    checkpoint = tmp_path / "checkpoint-10"
    checkpoint.mkdir()
    layout = {"tp_size": 1, "dp_size": data_parallel}
    recorder = RunRecorder(TrainFlags(output_dir=tmp_path), resume=None, rank=0, layout=layout)
    args = SimpleNamespace(per_device_train_batch_size=micro, gradient_accumulation_steps=accumulation)
    write_record(checkpoint / RECORD_NAME, {"format": "zerokit-run/1", "batch": recorder.batch(args)})
    return checkpoint


def test_the_recorded_batch_reads_back(tmp_path: Path):
    checkpoint = recorded(tmp_path, 2, 3, 4)
    assert saved_batch(checkpoint) == GlobalBatch(micro=2, accumulation=3, data_parallel=4)
    assert saved_batch(checkpoint).size == 24


def test_the_accumulation_that_keeps_the_global_batch():
    saved = GlobalBatch(micro=8, accumulation=1, data_parallel=2)
    assert accumulation_for(saved, 8, 1, CHECKPOINT) == 2
    assert accumulation_for(saved, 16, 1, CHECKPOINT) == 1
    assert accumulation_for(saved, 2, 4, CHECKPOINT) == 2
    assert accumulation_for(GlobalBatch(2, 3, 4), 2, 6, CHECKPOINT) == 2


def test_a_global_batch_the_new_ranks_cannot_make_is_refused_naming_the_sizes_that_can():
    saved = GlobalBatch(micro=2, accumulation=3, data_parallel=4)
    with pytest.raises(UserError) as refused:
        accumulation_for(saved, 2, 5, CHECKPOINT)
    assert str(refused.value) == (
        f"checkpoint {CHECKPOINT} was trained with a global batch of 24 (micro 2 x accumulation 3 x 4 data-parallel "
        "ranks); 5 data-parallel ranks with --per_device_train_batch_size 2 cannot make 24: resume on 1, 2, 3, 4, "
        "6 or 12 data-parallel ranks with that micro batch"
    )
    keep = r"cannot make 24: keep 4 data-parallel ranks with --per_device_train_batch_size 1, 2, 3 or 6$"
    with pytest.raises(UserError, match=keep):
        accumulation_for(saved, 5, 4, CHECKPOINT)  # no rank count makes 24 from micro 5
    both = r"resume on 1 or 2 data-parallel ranks with that micro batch, or keep 16 data-parallel ranks with .* 1$"
    with pytest.raises(UserError, match=both):
        accumulation_for(GlobalBatch(8, 1, 2), 8, 16, CHECKPOINT)
    with pytest.raises(UserError, match=r"a --per_device_train_batch_size whose product divides 24$"):
        accumulation_for(saved, 5, 5, CHECKPOINT)


def test_a_resume_says_the_accumulation_it_sets(tmp_path: Path):
    checkpoint = recorded(tmp_path, 8, 1, 2)
    notes: list[str] = []
    assert kept_accumulation(checkpoint, 8, 1, None, notes) == 2
    assert notes == [
        f"checkpoint {checkpoint} was trained with micro 8 x accumulation 1 x 2 data-parallel ranks, this run has "
        "1 data-parallel rank and micro 8: gradient accumulation 1 -> 2 keeps the global batch of 16"
    ]
    assert kept_accumulation(checkpoint, 8, 1, 2, notes) == 2  # given as it must be: taken


def test_an_explicit_accumulation_that_changes_the_global_batch_is_refused(tmp_path: Path):
    checkpoint = recorded(tmp_path, 8, 1, 2)
    with pytest.raises(UserError) as refused:
        kept_accumulation(checkpoint, 8, 1, 1, [])
    assert str(refused.value) == (
        "--gradient_accumulation_steps 1 with micro 8 on 1 data-parallel rank makes a global batch of 8, and "
        f"checkpoint {checkpoint} was trained with 16 (micro 8 x accumulation 1 x 2 data-parallel ranks): pass "
        "--gradient_accumulation_steps 2, or leave it out and train sets it"
    )


def test_a_checkpoint_without_a_recorded_batch_resumes_as_given_with_one_warning(tmp_path: Path):
    checkpoint = tmp_path / "checkpoint-10"
    checkpoint.mkdir()
    write_record(checkpoint / RECORD_NAME, {"format": "zerokit-run/1"})  # an older zerokit's record
    notes: list[str] = []
    assert kept_accumulation(checkpoint, 8, 1, None, notes) is None
    assert kept_accumulation(tmp_path, 8, 1, 3, notes) is None  # no record at all (the Trainer's own)
    assert len(notes) == 2
    assert notes[0].startswith(f"checkpoint {checkpoint} holds no record of its global batch")
