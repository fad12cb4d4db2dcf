"""generate's rows against the model's context: fitted (prompt cut from the left, new tokens capped) with one
warning, or refused in one line naming the fix; a batch split into calls that each fit."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from zerokit.foundations.errors import UserError
from zerokit.generate.context import (
    context_of,
    fit_rows,
    fit_to_context,
    fitted,
    kept_ids,
    refusal,
    shared_calls,
)
from zerokit.generate.prompts import Row


def test_the_context_is_the_configs_positional_limit():
    from transformers import GPT2Config, LlamaConfig

    assert context_of(GPT2Config(n_positions=64)) == 64
    assert context_of(LlamaConfig(max_position_embeddings=128)) == 128
    assert context_of(SimpleNamespace(vocab_size=10)) is None  # none known: rows are left as they are


@pytest.mark.parametrize(
    ("length", "max_new_tokens", "kept"),
    [
        (10, 24, (10, 24)),  # fits
        (100, 8, (56, 8)),  # a long prompt keeps its last tokens, room left for its new tokens
        (60, 8, (56, 8)),  # a prompt that fits alone is cut as far as its new tokens need
        (10, 500, (10, 54)),  # new tokens past the context: capped to the room after the prompt
        (100, 500, (32, 32)),  # both: the new tokens get half the context
        (64, 1, (63, 1)),  # at least one new token
    ],
)
def test_a_row_is_fitted_to_the_context(length: int, max_new_tokens: int, kept: tuple[int, int]):
    keep, new = fitted(length, max_new_tokens, 64)
    assert (keep, new) == kept and keep + new <= 64


def test_fitted_rows_and_their_one_warning():
    rows = [Row(0, "short", 8), Row(1, "long", 8), Row(2, "greedy", 500), Row(3, "short", 8)]
    fit = fit_rows(rows, [5, 100, 10, 5], 64)
    assert [(row.prompt_tokens, row.max_new_tokens) for row in fit.rows] == [(None, 8), (56, 8), (None, 54), (None, 8)]
    assert fit.cut == [1] and fit.capped == [2]
    assert fit.warning(64) == (
        "generate: warning: 2 of 4 rows (rows 1, 2) pass the model's context of 64 tokens with their new tokens: "
        "1 with the prompt cut from the left, 1 with the new tokens capped; --truncate error refuses such rows instead"
    )
    assert fit_rows(rows[:1], [5], 64).warning(64) is None


def test_the_warning_is_said_once_by_the_writer(capsys):
    rows = [Row(i, "long", 8) for i in range(5)]
    fit_to_context(rows, [100] * 5, 64, "left", say=True)
    fit_to_context(rows, [100] * 5, 64, "left", say=False)  # another rank: the same rows, nothing said
    (line,) = capsys.readouterr().err.splitlines()
    assert line.startswith("generate: warning: 5 of 5 rows (rows 0, 1, 2 and 2 more) pass")


@pytest.mark.parametrize(
    ("row", "length", "message"),
    [
        (
            Row(3, "long", 24),
            100,
            "--truncate error: row 3's prompt of 100 tokens leaves no room for new tokens in the model's context of "
            "64 tokens: pass --truncate left (keeps a prompt's last tokens), or prompts shorter than 64 tokens",
        ),
        (
            Row(3, "long", 24),
            50,
            "--truncate error: row 3's prompt of 50 tokens and 24 new tokens pass the model's context of 64 tokens: "
            "pass --truncate left (caps the new tokens), --max-new-tokens 14, or a shorter prompt",
        ),
        (
            Row(3, "long", 500, {"max_new_tokens": 500}),
            50,
            "--truncate error: row 3's prompt of 50 tokens and 500 new tokens pass the model's context of 64 tokens: "
            "pass --truncate left (caps the new tokens), its max_new_tokens field at most 14, or a shorter prompt",
        ),
    ],
)
def test_truncate_error_refuses_the_first_row_past_the_context(row: Row, length: int, message: str):
    assert str(refusal([Row(0, "short", 24), row], [5, length], 64)) == message
    with pytest.raises(UserError, match="more rows too") as refused:
        fit_to_context([row, row], [length, length], 64, "error", say=True)
    assert "(1 more rows too)" in str(refused.value)
    assert fit_to_context([Row(0, "short", 24)], [5], 64, "error", say=True) == [Row(0, "short", 24)]


def test_a_cut_prompt_keeps_its_leading_special_tokens():
    bos = 1
    assert kept_ids([bos, 5, 6, 7, 8], 3, {bos}) == [bos, 7, 8]
    assert kept_ids([5, 6, 7, 8], 3, {bos}) == [6, 7, 8]
    assert kept_ids([5, 6], 3, {bos}) == [5, 6]


def test_a_batch_runs_in_calls_that_fit_the_context():
    # a call runs every row as long as its longest generation, after its longest prompt
    assert shared_calls([59, 6, 6], [4, 50, 58], 64) == [slice(0, 1), slice(1, 3)]
    assert shared_calls([10, 10, 10], [8, 8, 8], 64) == [slice(0, 3)]
    assert shared_calls([59, 6], [4, 50], None) == [slice(0, 2)]  # no context known: one call
