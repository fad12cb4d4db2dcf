"""train's TrainingArguments defaults are HF's but for the embedded model, and every difference is listed."""

from __future__ import annotations

from pathlib import Path

import pytest

from zerokit.train.cli import build_parser
from zerokit.train.options import EMBEDDED_TRAINING_DEFAULTS, HF_DIFFERENCES, training_defaults

# The docs page that lists the differences from HF (the README links to it).
TRAIN_PAGE = Path(__file__).resolve().parents[2] / "docs" / "train.md"


def test_a_users_model_gets_hugging_faces_defaults():
    assert training_defaults(False, []) == {}
    assert training_defaults(False, ["--save_steps", "10"]) == {}


def test_the_embedded_model_keeps_its_short_job_defaults():
    assert training_defaults(True, []) == EMBEDDED_TRAINING_DEFAULTS
    assert training_defaults(True, [])["save_strategy"] == "no"


@pytest.mark.parametrize("flags", [["--save_steps", "10"], ["--save_steps=10"], ["--save-steps", "10"]])
def test_save_steps_alone_saves_every_n_steps_as_in_hf(flags: list[str]):
    """HF's save_strategy defaults to "steps": `--save_steps N` alone must not be swallowed by a "no"."""
    assert "save_strategy" not in training_defaults(True, flags)


def test_save_steps_through_hf_gives_steps(tmp_path: Path):
    from transformers import HfArgumentParser, TrainingArguments

    parser = HfArgumentParser(TrainingArguments)
    parser.set_defaults(**training_defaults(True, ["--save_steps", "10"]))
    (args,) = parser.parse_args_into_dataclasses(["--save_steps", "10", "--output_dir", str(tmp_path)])
    assert (args.save_strategy, args.save_steps) == ("steps", 10)


def test_every_difference_from_hf_is_in_the_help_and_the_docs():
    help_text = build_parser({}).format_help()
    page = TRAIN_PAGE.read_text()
    for flag, what in HF_DIFFERENCES:
        assert f"{flag:<20} {what}" in help_text
        assert f"| `{flag}` | {what} |" in page, f"docs/train.md's list of differences from HF lacks {flag}: {what}"
