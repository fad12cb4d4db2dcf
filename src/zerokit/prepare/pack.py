"""`prepare tokenize SOURCE`: tokenize once, group into fixed-length blocks, save_to_disk (Arrow).

`train --dataset FOLDER` then memory-maps the blocks on every rank; no rank tokenizes. The
folder holds a DatasetDict (train, validation) and PREPARED_NAME, which records the tokenizer
and block size so that train can refuse a mismatch.
"""

from __future__ import annotations

import json
import string
from pathlib import Path

from zerokit.foundations.errors import UserError
from zerokit.outputs.ownership import built_beside, check_writable
from zerokit.sources.data import (
    PREPARED_NAME,
    check_blocks,
    check_tokenizer,
    load_raw,
    read_prepared,
    resolve_source,
    tokenize_and_group,
)

FORMAT_VERSION = 1


def decode_escapes(template: str) -> str:
    """`\\n` and `\\t` typed on a command line become a newline and a tab."""
    return template.replace("\\n", "\n").replace("\\t", "\t")


def template_fields(template: str) -> list[str]:
    try:
        return [name for _, name, _, _ in string.Formatter().parse(template) if name]
    except ValueError as error:
        raise UserError(f"--template {template!r}: {error}; use {{column}} placeholders") from None


def apply_template(raw, template: str, num_proc: int | None):
    """Replace the columns with one `text` column: the template filled from each row."""
    columns = raw["train"].column_names
    missing = sorted(set(template_fields(template)) - set(columns))
    if missing:
        raise UserError(f"--template names {', '.join(missing)}, not columns of the dataset ({', '.join(columns)})")
    return raw.map(
        lambda row: {"text": template.format_map(row)}, remove_columns=columns, num_proc=num_proc, desc="templating"
    )


def tokenize_to_disk(
    source: str,
    tokenizer_name: str,
    output: Path,
    *,
    block_size: int | None = None,
    text_column: str = "text",
    template: str | None = None,
    num_proc: int | None = None,
    validation_split_percentage: int = 5,
    seed: int = 42,
    overwrite: bool = False,
) -> dict:
    """Tokenize SOURCE into OUTPUT (built beside it as its only writer, then renamed); return the metadata."""
    check_output(output, overwrite)
    with built_beside(output, "prepare tokenize", "--output") as partial:
        from transformers import AutoTokenizer

        tokenizer = AutoTokenizer.from_pretrained(tokenizer_name)
        check_tokenizer(tokenizer, tokenizer_name)
        block_size = block_size or min(tokenizer.model_max_length, 1024)
        raw = load_raw(resolve_source(source), validation_split_percentage, seed)
        if template:
            raw, text_column = apply_template(raw, decode_escapes(template), num_proc), "text"
        blocks = tokenize_and_group(raw, tokenizer, text_column, block_size, num_proc=num_proc)
        check_blocks(blocks, source, block_size)  # as train checks what it tokenizes: nothing published
        info = {
            "format": FORMAT_VERSION,
            "source": source,
            "tokenizer": tokenizer_name,
            "vocab_size": len(tokenizer),
            "block_size": block_size,
            "text_column": text_column,
            "template": template,
            "validation_split_percentage": validation_split_percentage,
            "seed": seed,
            "blocks": {split: len(data) for split, data in blocks.items()},
        }
        blocks.save_to_disk(str(partial), num_proc=num_proc)
        (partial / PREPARED_NAME).write_text(json.dumps(info, indent=2) + "\n")
    return info


def check_output(output: Path, overwrite: bool) -> None:
    """The output folder is replaced whole, so it must be one that prepare wrote (or empty):
    `--overwrite` never deletes a folder holding anything else (the corpus itself, say)."""
    check_writable(output, "--output")
    if output.exists() and not output.is_dir():
        raise UserError(f"output {output} is a file: pick another --output folder")
    if not output.is_dir() or not any(output.iterdir()):
        return
    if read_prepared(output) is None:
        raise UserError(
            f"output {output} holds files that prepare did not write (no {PREPARED_NAME}), and the output "
            "folder is replaced whole: pick another --output (a new or empty folder)"
        )
    if not overwrite:
        raise UserError(f"output {output} exists: pick another --output, or pass --overwrite to replace it")
