"""One batch through model.generate: left-padded prompts in, one output row per prompt out (the row's own
fields, its id, prompt, text and completion), with what the report needs (tokens made, time to first token).

A batch generates up to the largest limit among its rows; each row's completion is then cut at its own
limit (greedy and sampled tokens before it do not depend on the tokens after), then at the first --stop
string (which model.generate also stops on, so a batch ends once every row has met one).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from zerokit.commands.generate.prompts import Row
from zerokit.commands.generate.writing import ROW_ID


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
    model, tokenizer, rows: list[Row], sampling: Sampling, device: str, chats: list[str] | None = None
) -> BatchResult:
    """The rows generated from their prompts, or from `chats` (their prompts in the chat template, which holds
    its own special tokens)."""
    import torch
    from transformers import set_seed

    set_seed(sampling.seed + rows[0].index)  # a batch's samples depend on its rows, not on what ran before
    texts = chats or [row.prompt for row in rows]
    batch = tokenizer(texts, return_tensors="pt", padding=True, add_special_tokens=chats is None).to(device)
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
        prompt_ids = batch["input_ids"][i][batch["attention_mask"][i].bool()].tolist()
        completion = cut(decoded_after(tokenizer, prompt_ids, new), sampling.stop)
        made = {ROW_ID: row.index, "prompt": row.prompt, "text": texts[i] + completion, "completion": completion}
        result.rows.append(row.fields | made)
    return result


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

    from zerokit.commands.generate.loading import Placement, load_model

    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    tokenizer.padding_side = "left"
    model = load_model(model_dir, None, Placement())
    rows = [Row(index, prompt, max_new_tokens) for index, prompt in enumerate(prompts)]
    return [row["text"] for row in run_batch(model, tokenizer, rows, Sampling(), str(model.device)).rows]
