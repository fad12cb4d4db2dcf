"""training_args.bin holds no secret: the Trainer's arguments redact themselves when pickled
(zerokit.train.secret_free)."""

from __future__ import annotations

import io

import torch
from transformers import HfArgumentParser, TrainingArguments

from zerokit.train.secret_free import SecretFreeArguments, secret_fields

TOKEN = "hf_secretFreeUnitMarker"


def parsed(*flags: str) -> SecretFreeArguments:
    parser = HfArgumentParser(SecretFreeArguments)
    (args,) = parser.parse_args_into_dataclasses(["--output_dir", "out", "--use_cpu", "true", *flags])
    return args


def test_the_pickle_holds_no_token_and_loads_as_plain_training_arguments():
    args = parsed("--hub_token", TOKEN, "--learning_rate", "3e-4")
    saved = io.BytesIO()
    torch.save(args, saved)
    assert TOKEN.encode() not in saved.getvalue() and b"zerokit" not in saved.getvalue()
    saved.seek(0)
    loaded = torch.load(saved, weights_only=False)
    assert type(loaded) is TrainingArguments
    assert loaded.hub_token == "<redacted>" and loaded.learning_rate == 3e-4
    assert args.hub_token == TOKEN  # pushing to the Hub still reads it from the live arguments


def test_only_fields_that_hold_a_secret_are_redacted():
    # include_num_input_tokens_seen and average_tokens_across_devices name tokens, not a token.
    assert secret_fields(parsed("--hub_token", TOKEN)) == ["hub_token"]
    assert secret_fields(parsed()) == []  # no token given: nothing to hide, None stays None
