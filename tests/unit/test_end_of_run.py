"""The end of a run, after training (issue 61): a failure there is one line that says what failed and what was
kept, with an exit code for the part, not a rank's traceback after the work."""

from __future__ import annotations

import pytest

from zerokit.foundations.errors import END_OF_RUN_EXIT_CODES, EndOfRunFailure
from zerokit.outputs.checkpoints import PREFIX
from zerokit.train.training_run import after_training, last_checkpoint


def test_an_evaluation_that_finds_no_eval_loss_is_one_line_naming_the_kept_model(tmp_path):
    def evaluate():
        metrics = {"epoch": 1.0}
        return metrics["eval_loss"]

    with pytest.raises(EndOfRunFailure) as failed:
        after_training("evaluation", evaluate, lambda: f"the final model is saved in {tmp_path}")
    assert str(failed.value) == (
        f"training finished, then the evaluation failed ('eval_loss'); the final model is saved in {tmp_path}"
    )
    assert failed.value.exit_code == END_OF_RUN_EXIT_CODES["evaluation"] == 4


def test_a_failed_final_save_names_the_checkpoint_a_resume_takes(tmp_path):
    assert last_checkpoint(tmp_path).startswith("no checkpoint was kept")
    checkpoint = tmp_path / f"{PREFIX}-8"
    checkpoint.mkdir()
    (checkpoint / "trainer_state.json").write_text('{"global_step": 8}')

    def save():
        raise OSError(28, "No space left on device\n(while writing model.safetensors)")

    with pytest.raises(EndOfRunFailure) as failed:
        after_training("final save", save, lambda: last_checkpoint(tmp_path))
    line = str(failed.value)
    assert line.startswith("training finished, then the final save failed ([Errno 28] No space left on device (while")
    assert "\n" not in line and failed.value.exit_code == 3
    assert line.endswith(f"; the last checkpoint, {checkpoint}, is kept: --resume auto resumes from it")


def test_every_part_has_its_own_code_and_none_restarts_under_launch():
    from zerokit.launch.watch.exits import is_machine_fault

    codes = list(END_OF_RUN_EXIT_CODES.values())
    assert len(set(codes)) == len(codes) and not any(is_machine_fault(code) for code in codes)
    assert not set(codes) & {0, 1, 2, 85, 124, 130}
