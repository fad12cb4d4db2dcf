"""The model's context (the positions its config says it embeds) against each row's prompt and new tokens.

A row past it would end the run in an IndexError deep inside the model, after the model loaded, with the
rows after it lost. So every row is measured with the tokenizer before the model loads: with
`--truncate left` (the default) the rows past the context are fitted to it, said in one warning per run;
with `--truncate error` the run is refused in one line.

How a row is fitted: its new tokens get up to half the context (fewer if it asks fewer); the prompt keeps
the rest, its oldest tokens cut first (its leading special tokens, such as BOS, kept), and room the prompt
leaves goes to the new tokens. So a prompt is cut only as far as its new tokens need, a `max_new_tokens`
past the context is capped to the room the prompt leaves, and every row generates at least one token.
A model whose config names no positional limit is left alone.
"""

from __future__ import annotations

import dataclasses
import sys
from collections.abc import Callable
from dataclasses import dataclass

from zerokit.foundations.errors import UserError
from zerokit.generate.prompts import ROW_LIMIT_FIELD, Row
from zerokit.train.model.loading import position_limit

MEASURED_AT_ONCE = 1024  # prompts tokenized per call when measuring: only their lengths are kept


def context_of(config) -> int | None:
    """The most positions the model takes (prompt and new tokens together), or None if its config names none."""
    limit = position_limit(config)
    return limit if limit is not None and limit >= 2 else None  # below 2 no prompt leaves room for a token


def model_context(source: str) -> int | None:
    """context_of the config at source (a folder or Hub id); None where it cannot be read, so that loading the
    model says what is wrong as it does without this check."""
    from transformers import AutoConfig

    try:
        return context_of(AutoConfig.from_pretrained(source))
    except (OSError, ValueError):
        return None


def prompt_ids(tokenizer, texts: list[str], templated: bool) -> list[list[int]]:
    """Each prompt's token ids as the model reads them (a chat-templated text holds its own special tokens).
    Not verbose: a prompt past the tokenizer's model_max_length is this module's to report, once."""
    return tokenizer(texts, add_special_tokens=not templated, verbose=False)["input_ids"]


def kept_ids(ids: list[int], keep: int, special: set[int]) -> list[int]:
    """ids cut from the left to `keep` tokens, their leading special tokens (BOS) kept in front."""
    if len(ids) <= keep:
        return ids
    head = 0
    while head < len(ids) and ids[head] in special:
        head += 1
    head = head if head < keep else 0
    return ids[:head] + ids[len(ids) - keep + head :]


def shared_calls(lengths: list[int], new_tokens: list[int], context: int | None) -> list[slice]:
    """A batch's rows in consecutive parts that one generate call can take within the context: a call runs
    every row for as many steps as its longest generation, on the positions after its longest prompt."""
    if context is None:
        return [slice(0, len(lengths))]
    parts, start, longest, most = [], 0, 0, 0
    for i, (length, new) in enumerate(zip(lengths, new_tokens, strict=True)):
        if i > start and max(longest, length) + max(most, new) > context:
            parts.append(slice(start, i))
            start, longest, most = i, 0, 0
        longest, most = max(longest, length), max(most, new)
    parts.append(slice(start, len(lengths)))
    return parts


def prompt_lengths(rows: list[Row], tokenizer, chats: Callable[[list[Row]], list[str]] | None) -> list[int]:
    """Each row's prompt length in tokens: its prompt, or with `chats` its prompt in the chat template."""
    lengths: list[int] = []
    for start in range(0, len(rows), MEASURED_AT_ONCE):
        part = rows[start : start + MEASURED_AT_ONCE]
        texts = chats(part) if chats else [row.prompt for row in part]
        lengths += [len(ids) for ids in prompt_ids(tokenizer, texts, templated=chats is not None)]
    return lengths


def fitted(length: int, max_new_tokens: int, context: int) -> tuple[int, int]:
    """(prompt tokens kept, new tokens) of a prompt of `length` tokens asking for max_new_tokens."""
    room = min(max_new_tokens, max(context // 2, context - length))
    keep = min(length, context - room)
    return keep, min(max_new_tokens, context - keep)


@dataclass
class Fit:
    """The rows fitted to the context, and the ids of those changed."""

    rows: list[Row]
    cut: list[int] = dataclasses.field(default_factory=list)  # prompts cut from the left
    capped: list[int] = dataclasses.field(default_factory=list)  # new tokens capped, the prompt whole

    def warning(self, context: int) -> str | None:
        changed = sorted(self.cut + self.capped)
        if not changed:
            return None
        named = ", ".join(map(str, changed[:3])) + (f" and {len(changed) - 3} more" if len(changed) > 3 else "")
        which = f"{'rows' if changed[1:] else 'row'} {named}"
        return (
            f"generate: warning: {len(changed)} of {len(self.rows)} rows ({which}) pass the model's context of "
            f"{context} tokens with their new tokens: {len(self.cut)} with the prompt cut from the left, "
            f"{len(self.capped)} with the new tokens capped; --truncate error refuses such rows instead"
        )


def fit_rows(rows: list[Row], lengths: list[int], context: int) -> Fit:
    """The rows with their prompts cut (Row.prompt_tokens) and new tokens capped to fit the context."""
    fit = Fit([])
    for row, length in zip(rows, lengths, strict=True):
        keep, new = fitted(length, row.max_new_tokens, context)
        if keep < length:
            fit.cut.append(row.index)
            row = dataclasses.replace(row, max_new_tokens=new, prompt_tokens=keep)
        elif new < row.max_new_tokens:
            fit.capped.append(row.index)
            row = dataclasses.replace(row, max_new_tokens=new)
        fit.rows.append(row)
    return fit


def refusal(rows: list[Row], lengths: list[int], context: int) -> UserError | None:
    """--truncate error: the first row past the context in one line, naming the fixes; None if none is."""
    past = [(row, length) for row, length in zip(rows, lengths, strict=True) if length + row.max_new_tokens > context]
    if not past:
        return None
    row, length = past[0]
    said = f"--truncate error: row {row.index}'s prompt of {length} tokens"
    context_said = f"the model's context of {context} tokens" + (
        f" ({len(past) - 1} more rows too)" if past[1:] else ""
    )
    if length >= context:
        return UserError(
            f"{said} leaves no room for new tokens in {context_said}: pass --truncate left (keeps a prompt's "
            f"last tokens), or prompts shorter than {context} tokens"
        )
    limit = context - length
    fix = (
        f"its {ROW_LIMIT_FIELD} field at most {limit}" if ROW_LIMIT_FIELD in row.fields else f"--max-new-tokens {limit}"
    )
    return UserError(
        f"{said} and {row.max_new_tokens} new tokens pass {context_said}: pass --truncate left (caps the new "
        f"tokens), {fix}, or a shorter prompt"
    )


def fit_to_context(rows: list[Row], lengths: list[int], context: int, truncate: str, say: bool) -> list[Row]:
    """The rows as they fit the context (refused with --truncate error); the warning said when `say`."""
    if truncate == "error":
        error = refusal(rows, lengths, context)
        if error is not None:
            raise error
        return rows
    fit = fit_rows(rows, lengths, context)
    warning = fit.warning(context)
    if warning and say:
        print(warning, file=sys.stderr, flush=True)
    return fit.rows


def fit_to_model(
    rows: list[Row], tokenizer, source: str, chats: Callable[[list[Row]], list[str]] | None, truncate: str, say: bool
) -> tuple[list[Row], int | None]:
    """The rows fitted to the context of the model whose config is at source (fit_to_context), and that context;
    the rows as they are where the config names none."""
    context = model_context(source)
    if context is None:
        return rows, None
    return fit_to_context(rows, prompt_lengths(rows, tokenizer, chats), context, truncate, say), context
