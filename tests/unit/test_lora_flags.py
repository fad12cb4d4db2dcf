"""`--lora` parsing, per-architecture targets, `--train-last-layers`, and the fine-tuning flag checks of train."""

from __future__ import annotations

import pytest

from zerokit.foundations.errors import UserError
from zerokit.train.cli import parse
from zerokit.train.model.lora import LoraSpec, count_parameters, default_targets, parse_lora, train_last_layers


def test_parse_lora_defaults_and_targets():
    assert parse_lora("") == LoraSpec()
    assert parse_lora("r=4,alpha=8,dropout=0,targets=q_proj,v_proj") == LoraSpec(4, 8, 0.0, ("q_proj", "v_proj"))
    assert parse_lora("targets=c_attn, r=2") == LoraSpec(r=2, targets=("c_attn",))


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("r=eight", "invalid literal"),
        ("rank=8", "unknown key"),
        ("8", "is not key=value"),
        ("r=0", "r must be at least 1"),
    ],
)
def test_bad_lora_specs_are_one_line_errors(text, message):
    with pytest.raises(UserError, match=message):
        parse_lora(text)


def test_default_targets_per_architecture():
    assert default_targets("gpt2") == ("c_attn", "c_proj")
    assert default_targets("llama") == ("q_proj", "k_proj", "v_proj", "o_proj")
    assert default_targets("bloom") == ("query_key_value",)  # peft's own table
    with pytest.raises(UserError, match="pass --lora targets="):
        default_targets("no-such-type")


def test_train_last_layers_freezes_all_but_the_last_blocks_and_the_final_norm():
    from transformers import GPT2Config, GPT2LMHeadModel

    model = GPT2LMHeadModel(GPT2Config(n_layer=3, n_head=2, n_embd=16, n_positions=8, vocab_size=32))
    train_last_layers(model, 1)
    trainable = {name for name, p in model.named_parameters() if p.requires_grad}
    assert trainable and all(n.startswith(("transformer.h.2.", "transformer.ln_f.")) for n in trainable)
    assert "transformer.ln_f.weight" in trainable and "transformer.wte.weight" not in trainable
    assert 0 < count_parameters(model)[0] < count_parameters(model)[1]
    with pytest.raises(UserError, match="the model has 3 layers"):
        train_last_layers(model, 4)


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--lora", "--train-last-layers", "2"], "exclude each other"),
        (["--merge"], "--merge needs --lora"),
        (["--lora", "--merge", "--model-type", "gpt2"], "pretrained --model"),
        (["--lora", "r=x"], "--lora 'r=x'"),
        (["--train-last-layers", "0"], "at least 1"),
    ],
)
def test_fine_tuning_flag_errors(argv, message):
    with pytest.raises(UserError, match=message):
        parse(argv)
