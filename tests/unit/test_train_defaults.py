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


def missing_integration() -> str:
    """A --report_to integration whose package this environment lacks."""
    from transformers.integrations import INTEGRATION_TO_CALLBACK, get_available_reporting_integrations

    available = {*get_available_reporting_integrations(), "azure_ml", "flyte"}  # HF's list cannot tell for these
    return next(name for name in sorted(INTEGRATION_TO_CALLBACK) if name not in available)


@pytest.mark.parametrize(
    ("flags", "says"),
    [
        (["--fp16", "true", "--bf16", "true"], "HF's TrainingArguments: At most one of fp16 and bf16 can be True, "
         "but not both"),  # TrainingArguments' ValueError: a traceback
        (["--optim", "bogus"], "argument --optim: invalid choice: 'bogus' (choose from 'adamw_torch', "),  # 107 lines
        (["--report_to", "MISSING"], "--report_to MISSING needs its package, which this environment lacks"),
        (["--torch_compile_backend", "bogus"], "--torch_compile_backend bogus: not one of aot_eager, "),
    ],
)  # fmt: skip
def test_what_hfs_trainer_refuses_late_is_refused_with_the_arguments(tmp_path: Path, flags: list[str], says: str):
    """Refused by TrainingArguments when built, by its parser, or by the Trainer only once built (after the run
    claimed its folder): each one line, raised alike on every rank (rank 0 says it), before the run writes."""
    from zerokit.train.cli import parse
    from zerokit.train.run import FlagsRefused, training_arguments

    integration = missing_integration()
    options, hf_flags = parse(["--config", "none", "--output-dir", str(tmp_path / "out"), *flags], environ={})
    with pytest.raises(FlagsRefused) as refused:
        training_arguments(options, [word.replace("MISSING", integration) for word in hf_flags], None, False, [])
    assert str(refused.value).startswith(says.replace("MISSING", integration)) and "\n" not in str(refused.value)
