"""The rows to generate for, read and checked before any model loads: a template naming a field a row lacks
fails here in one line, not after minutes of loading.

Each row has an id, its index in the input (prompts of --prompt, then --prompts-file, then --jsonl, then
--dataset), which every output row records: `--resume` matches rows by it, and ranks split rows by it.

A line of --prompts-file that is not UTF-8, or an empty prompt (`--prompt ''`, a row's empty field), does not end
the run: its row carries the error (where the line stops being UTF-8, or where the prompt came from, and the fix),
is written as it is, with no answer, and is said once on stderr; the other rows are answered. --jsonl and
--dataset rows are JSON or CSV, so a file of them that is not UTF-8 is refused, in one line naming the byte.
"""

from __future__ import annotations

import dataclasses
import random
from dataclasses import dataclass, field

from zerokit.foundations.errors import UserError
from zerokit.foundations.utf8 import iconv_fix
from zerokit.generate.options import GenerateFlags
from zerokit.generate.sources import records, text_lines

ROW_LIMIT_FIELD = "max_new_tokens"  # a row's own limit on new tokens, over --max-new-tokens
NAMED = 5  # row ids a warning names before "..."


@dataclass(frozen=True)
class Row:
    index: int  # the row id: its place in the input
    prompt: str  # as filled from the template
    max_new_tokens: int
    fields: dict = field(default_factory=dict)  # the row's own fields, kept in its output row
    prompt_tokens: int | None = None  # the prompt's last tokens kept, where cut to fit the context (context.py)
    error: str | None = None  # why the row has no answer (not UTF-8, an empty prompt): written so, never generated


def read_rows(options: GenerateFlags) -> list[Row]:
    """Every row (or --sample N of them, in input order), templates filled."""
    from zerokit.prepare.pack import decode_escapes

    for path in filter(None, (options.prompts_file, options.jsonl)):
        if not path.is_file():
            raise UserError(f"prompts file not found: {path}")
    if options.template and not (options.jsonl or options.dataset):
        raise UserError("--template fills prompts from --jsonl rows (or --dataset rows): pass --jsonl or --dataset")
    sources: list[tuple[str, dict | None, str | None]] = [("--prompt", None, p) for p in options.prompt]
    errors: dict[int, str] = {}  # by the row's index: why it has no answer
    if options.prompts_file:
        prompts = options.prompts_file
        for line in filter(lambda line: line.text.strip(), text_lines(prompts)):
            if line.bad is not None:
                errors[len(sources)] = f"{prompts} is not UTF-8 at {line.bad}: {iconv_fix(prompts)}"
            sources.append((f"{prompts}:{line.number}", None, line.text))
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
            row = Row(index, text or "", options.max_new_tokens, error=errors.get(index))
        else:
            row = Row(index, fill(template, fields, where), row_limit(fields, where, options), fields)
        if not row.prompt and not row.error:  # no token to continue from (one that ended each rank in a traceback)
            row = dataclasses.replace(row, error=f"{where}: the prompt is empty: give it text")
        rows.append(row)
    return rows


def unanswered_line(rows: list[Row]) -> str:
    """One line for the rows that have no answer: which, the first one's error (with the fix), what then."""
    ids = ", ".join(str(row.index) for row in rows[:NAMED]) + (", ..." if len(rows) > NAMED else "")
    return (
        f"{len(rows)} row(s) written with an error instead of an answer (row {ids}): {rows[0].error}; then run "
        "again with --resume to answer them"
    )


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
