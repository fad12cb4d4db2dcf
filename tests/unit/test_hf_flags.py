"""TrainingArguments flags are checked before torch loads: unknown names, prefixes, nonsense numbers."""

from __future__ import annotations

import pytest

from zerokit.foundations.errors import UserError
from zerokit.train.hf_flags import check_hf_flags, training_argument_names


def test_field_names_come_from_the_installed_transformers():
    names = training_argument_names()
    assert {"learning_rate", "max_steps", "save_strategy", "bf16", "deepspeed"} <= names


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--lerning_rate", "1e-4"], "unknown flag --lerning_rate: did you mean --learning_rate?"),
        (["--learning_rat", "1e-4"], "unknown flag --learning_rat: did you mean --learning_rate?"),
        (["--max_steps", "-5"], "--max_steps -5: must be at least 1"),
        (["--max_steps=0"], "--max_steps 0: must be at least 1"),
        (["--per_device_train_batch_size", "0"], "must be at least 1"),
        (["--learning_rate", "fast"], "--learning_rate 'fast' is not a number"),
        (["--save_total_limit", "0"], "--save_total_limit 0: must be at least 1"),
        (["--deepspeed", "ds.json"], "--deepspeed is set by train itself: give the DeepSpeed config with --config"),
    ],
)
def test_bad_flags_are_refused_in_one_line(argv: list[str], message: str):
    with pytest.raises(UserError) as caught:
        check_hf_flags(argv, ["--output-dir", "--overwrite"])
    assert message in str(caught.value) and "\n" not in str(caught.value)


def test_good_flags_pass_in_both_spellings():
    check_hf_flags(["--learning-rate", "1e-4", "--max_steps", "3", "--no_remove_unused_columns", "--bf16", "true"], [])


def test_a_misspelt_zerokit_flag_is_named_too():
    with pytest.raises(UserError, match="did you mean --overwrite"):
        check_hf_flags(["--overwirte"], ["--overwrite", "--output-dir"])
