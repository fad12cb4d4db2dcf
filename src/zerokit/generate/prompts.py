"""The rows to generate for, read and checked before any model loads: a template naming a field a row lacks
fails here in one line, not after minutes of loading.

Each row has an id, its index in the input (prompts of --prompt, then --prompts-file, then --jsonl, then
--dataset), which every output row records: `--resume` matches rows by it, and ranks split rows by it.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field

from zerokit.foundations.errors import UserError
from zerokit.generate.options import GenerateFlags
from zerokit.generate.sources import records

ROW_LIMIT_FIELD = "max_new_tokens"  # a row's own limit on new tokens, over --max-new-tokens


@dataclass(frozen=True)
class Row:
    index: int  # the row id: its place in the input
    prompt: str  # as filled from the template
    max_new_tokens: int
    fields: dict = field(default_factory=dict)  # the row's own fields, kept in its output row
    prompt_tokens: int | None = None  # the prompt's last tokens kept, where cut to fit the context (context.py)


def read_rows(options: GenerateFlags) -> list[Row]:
    """Every row (or --sample N of them, in input order), templates filled."""
    from zerokit.prepare.pack import decode_escapes

    for path in filter(None, (options.prompts_file, options.jsonl)):
        if not path.is_file():
            raise UserError(f"prompts file not found: {path}")
    if options.template and not (options.jsonl or options.dataset):
        raise UserError("--template fills prompts from --jsonl rows (or --dataset rows): pass --jsonl or --dataset")
    sources: list[tuple[str, dict | None, str | None]] = [("--prompt", None, p) for p in options.prompt]
    if options.prompts_file:
        lines = options.prompts_file.read_text().splitlines()
        sources += [(f"{options.prompts_file}:{n}", None, line) for n, line in enumerate(lines, 1) if line.strip()]
    for path, flag in ((options.jsonl, "--jsonl"), (options.dataset, "--dataset")):
        if path:
            sources += [(where, row, None) for where, row in records(path, options.split, flag)]
    if not sources:
        raise UserError("no prompts: pass --prompt TEXT, --prompts-file FILE, --jsonl FILE or --dataset PATH")
    indices = range(len(sources))
    if options.sample is not None and options.sample < len(sources):
        indices = sorted(random.Random(options.seed).sample(indices, options.sample))
    template = decode_escapes(options.template) if options.template else "{prompt}"
    rows = []
    for index in indices:
        where, fields, text = sources[index]
        if fields is None:
            rows.append(Row(index, text or "", options.max_new_tokens))
        else:
            rows.append(Row(index, fill(template, fields, where), row_limit(fields, where, options), fields))
    return rows


def fill(template: str, row: dict, where: str) -> str:
    try:
        return template.format_map(row)
    except KeyError as error:
        raise UserError(f"{where}: no field {error} for the template; the row has {', '.join(row)}") from None


def row_limit(row: dict, where: str, options: GenerateFlags) -> int:
    """The row's own `max_new_tokens` field if it has one, else --max-new-tokens."""
    value = row.get(ROW_LIMIT_FIELD)
    if value is None or value == "":
        return options.max_new_tokens
    try:
        limit = int(value)
    except (TypeError, ValueError):
        limit = 0
    if limit < 1 or str(limit) != str(value).strip():
        raise UserError(f"{where}: {ROW_LIMIT_FIELD}={value!r} is not a whole number of at least 1")
    return limit


def chat_prompts(rows: list[Row], tokenizer, model: str) -> list[str]:
    """Each prompt as the user message of the tokenizer's chat template, ready for the assistant's answer."""
    if not getattr(tokenizer, "chat_template", None):
        raise UserError(f"--chat: the tokenizer of {model} has no chat template: drop --chat, or use a chat model")
    return [
        tokenizer.apply_chat_template(
            [{"role": "user", "content": row.prompt}], tokenize=False, add_generation_prompt=True
        )
        for row in rows
    ]
