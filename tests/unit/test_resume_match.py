"""A resume's checkpoint against the run: another model or precision refused in one line, from config dicts and the
checkpoint's files (never its weights); the same model in the same precision passes."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from zerokit.image.provenance import RECORD_NAME
from zerokit.train.checkpoints.resume_match import ResumeMismatch, check_resume_match, model_difference, saved_precision

GPT2 = {"model_type": "gpt2", "architectures": ["GPT2LMHeadModel"], "vocab_size": 512, "n_embd": 128, "n_layer": 2,
        "n_head": 4, "n_inner": None, "resid_pdrop": 0.1}  # fmt: skip


def test_the_same_model_passes_whatever_else_its_config_says():
    fresh = {**GPT2, "architectures": None, "resid_pdrop": 0.0}  # a fresh config names no class; dropout is free
    assert model_difference(GPT2, fresh) is None


def test_another_vocabulary_or_layer_count_is_named_with_both_sides():
    assert model_difference(GPT2, {**GPT2, "vocab_size": 1024}) == (
        "a gpt2 model of vocabulary size 512, this run's has vocabulary size 1024"
    )
    assert model_difference(GPT2, {**GPT2, "n_layer": 4, "n_head": 8}) == (
        "a gpt2 model of layer count 2, attention heads 4, this run's has layer count 4, attention heads 8"
    )


def test_another_architecture_is_named_before_any_size():
    llama = {"model_type": "llama", "architectures": None, "vocab_size": 512, "hidden_size": 64}
    assert model_difference(GPT2, llama) == "a gpt2 (GPT2LMHeadModel) model, this run's is a llama model"
    head = {**GPT2, "architectures": ["GPT2ForSequenceClassification"]}
    assert "this run's is a gpt2 (GPT2ForSequenceClassification) model" in model_difference(GPT2, head)


def test_the_precision_is_the_records_or_its_resolved_deepspeed_configs():
    assert saved_precision({"precision": "bf16"}) == "bf16"
    older = {"deepspeed": {"resolved": {"bf16": {"enabled": False}, "fp16": {"enabled": True}}}}
    assert saved_precision(older) == "fp16"
    assert saved_precision({"deepspeed": {"resolved": {"bf16": {"enabled": False}}}}) == "fp32"
    assert saved_precision({"deepspeed": None}) is None


def checkpoint_of(tmp_path: Path, config: dict | None, record: dict | None) -> Path:
    checkpoint = tmp_path / "checkpoint-6"
    checkpoint.mkdir()
    if config is not None:
        (checkpoint / "config.json").write_text(json.dumps(config))
    if record is not None:
        (checkpoint / RECORD_NAME).write_text(json.dumps(record))
    return checkpoint


def test_another_precision_is_refused_in_one_line_naming_the_flag(tmp_path: Path):
    checkpoint = checkpoint_of(tmp_path, GPT2, {"precision": "bf16"})
    check_resume_match(checkpoint, GPT2, "bf16")
    with pytest.raises(ResumeMismatch) as refused:
        check_resume_match(checkpoint, GPT2, "fp32")
    message = str(refused.value)
    assert "\n" not in message and refused.value.exit_code == 2
    assert f"checkpoint {checkpoint} was trained in bf16, this run trains in fp32: resume it in bf16 (--bf16 true)" in (
        message
    )
    assert "another --output-dir" in message and "--overwrite without --resume" in message


def test_another_model_is_refused_naming_the_ways_on(tmp_path: Path):
    checkpoint = checkpoint_of(tmp_path, GPT2, None)
    with pytest.raises(ResumeMismatch, match=r"holds a gpt2 \(GPT2LMHeadModel\) model, this run's is a llama model: "
                       r"resume it with the model that wrote it .*another --output-dir.*--overwrite"):  # fmt: skip
        check_resume_match(checkpoint, {"model_type": "llama"}, "fp32")


def test_what_a_checkpoint_does_not_record_is_not_compared(tmp_path: Path):
    check_resume_match(checkpoint_of(tmp_path, None, None), GPT2, "fp32")
