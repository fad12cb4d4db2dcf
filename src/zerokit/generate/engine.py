"""One batch through model.generate: left-padded prompts in, one output row per prompt out (the row's own
fields, its id, prompt, text and completion), with what the report needs (tokens made, time to first token).

A batch generates up to the largest limit among its rows; each row's completion is then cut at its own
limit (greedy and sampled tokens before it do not depend on the tokens after), then at the first --stop
string (which model.generate also stops on, so a batch ends once every row has met one). Every row of a
call runs that long, so a batch whose rows would then pass the model's context runs in several calls.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from zerokit.generate.context import kept_ids, prompt_ids, shared_calls
from zerokit.generate.prompts import Row
from zerokit.generate.writing import ROW_ID


@dataclass(frozen=True)
class Sampling:
    temperature: float = 0.0  # 0: greedy
    top_p: float = 1.0
    seed: int = 0
    stop: tuple[str, ...] = ()

    def generate_kwargs(self, tokenizer) -> dict:
        kwargs: dict = {"do_sample": False}
        if self.temperature > 0:
            kwargs = {"do_sample": True, "temperature": self.temperature, "top_p": self.top_p}
        if self.stop:
            kwargs |= {"stop_strings": list(self.stop), "tokenizer": tokenizer}
        return kwargs


@dataclass
class BatchResult:
    rows: list[dict] = field(default_factory=list)
    tokens: int = 0  # tokens generated, up to each row's limit and end of sequence
    first_token_s: float | None = None  # from the batch's start to its first new token


class FirstToken:
    """A streamer (model.generate's hook on each new step) that notes when the first new token came: its
    first call is the prompt, its second the first token of every row of the batch."""

    def __init__(self) -> None:
        self.calls, self.at = 0, None

    def put(self, value) -> None:
        self.calls += 1
        if self.calls == 2:
            self.at = time.perf_counter()

    def end(self) -> None:
        pass


def run_batch(
    model,
    tokenizer,
    rows: list[Row],
    sampling: Sampling,
    device: str,
    chats: list[str] | None = None,
    context: int | None = None,
) -> BatchResult:
    """The rows generated from their prompts, or from `chats` (their prompts in the chat template, which holds
    its own special tokens); a prompt cut to fit the context (Row.prompt_tokens) generates from its last
    tokens. With the model's context, a batch runs in as many generate calls as keep every row in it
    (shared_calls); each row fits alone (context.py)."""
    texts = chats or [row.prompt for row in rows]
    special = set(tokenizer.all_special_ids)
    ids = [
        kept_ids(row_ids, row.prompt_tokens, special) if row.prompt_tokens else row_ids
        for row, row_ids in zip(rows, prompt_ids(tokenizer, texts, templated=chats is not None), strict=True)
    ]
    result = BatchResult()
    for part in shared_calls([len(row_ids) for row_ids in ids], [row.max_new_tokens for row in rows], context):
        made = run_call(model, tokenizer, rows[part], ids[part], texts[part], sampling, device)
        result.rows += made.rows
        result.tokens += made.tokens
        result.first_token_s = made.first_token_s if result.first_token_s is None else result.first_token_s
    return result


def run_call(
    model, tokenizer, rows: list[Row], ids: list[list[int]], texts: list[str], sampling: Sampling, device: str
) -> BatchResult:
    """One model.generate call: the rows' prompt ids, left-padded, each row cut at its own limit."""
    import torch
    from transformers import set_seed

    set_seed(sampling.seed + rows[0].index)  # a call's samples depend on its rows, not on what ran before
    batch = {name: tensor.to(device) for name, tensor in left_padded(ids, tokenizer.pad_token_id).items()}
    streamer, started = FirstToken(), time.perf_counter()
    with torch.no_grad():
        out = model.generate(
            **batch,
            max_new_tokens=max(row.max_new_tokens for row in rows),
            pad_token_id=tokenizer.pad_token_id,
            streamer=streamer,
            **sampling.generate_kwargs(tokenizer),
        )
    result = BatchResult(first_token_s=None if streamer.at is None else streamer.at - started)
    width = batch["input_ids"].shape[1]
    for i, row in enumerate(rows):
        new = out[i, width : width + row.max_new_tokens].tolist()
        if tokenizer.eos_token_id in new:
            new = new[: new.index(tokenizer.eos_token_id) + 1]
        result.tokens += len(new)
        completion = cut(decoded_after(tokenizer, ids[i], new), sampling.stop)
        made = {ROW_ID: row.index, "prompt": row.prompt, "text": texts[i] + completion, "completion": completion}
        result.rows.append(row.fields | made)
    return result


def left_padded(ids: list[list[int]], pad_id: int) -> dict:
    """The prompts as one batch, padded on the left (generate continues each at the right edge), with the mask
    that hides the padding. Built here, not by the tokenizer, because some prompts are cut (kept_ids)."""
    import torch

    width = max(map(len, ids))
    return {
        "input_ids": torch.tensor([[pad_id] * (width - len(row)) + row for row in ids], dtype=torch.long),
        "attention_mask": torch.tensor([[0] * (width - len(row)) + [1] * len(row) for row in ids], dtype=torch.long),
    }


def decoded_after(tokenizer, prompt_ids: list[int], new: list[int]) -> str:
    """The text of the new tokens as they read after the prompt (a tokenizer that drops a word's leading
    space at the start of a text keeps it here)."""
    before = tokenizer.decode(prompt_ids, skip_special_tokens=True)
    whole = tokenizer.decode(prompt_ids + new, skip_special_tokens=True)
    return whole[len(before) :] if whole.startswith(before) else tokenizer.decode(new, skip_special_tokens=True)


def cut(completion: str, stops: tuple[str, ...]) -> str:
    """completion up to the first of the stop strings found in it (none: whole)."""
    ends = [completion.find(stop) for stop in stops if stop in completion]
    return completion[: min(ends)] if ends else completion


def generate(model_dir: str, prompts: list[str], max_new_tokens: int = 24) -> list[str]:
    """Greedy completions (prompt included) of prompts, in one process: `demo`'s samples."""
    from transformers import AutoTokenizer

    from zerokit.generate.loading import Placement, load_model

    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    tokenizer.padding_side = "left"
    model = load_model(model_dir, None, Placement())
    rows = [Row(index, prompt, max_new_tokens) for index, prompt in enumerate(prompts)]
    return [row["text"] for row in run_batch(model, tokenizer, rows, Sampling(), str(model.device)).rows]
