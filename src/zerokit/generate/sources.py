"""The rows of a dataset as users have them: a .jsonl/.json/.csv file, or a folder `datasets` saved with
save_to_disk. A folder `prepare tokenize` wrote holds token blocks, not text, and is refused. And the lines of a
prompts file, where a line that is not UTF-8 is kept, with where it stops being so, so that it can be named
in the output instead of ending the run."""

from __future__ import annotations

import codecs
import csv
import io
import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from zerokit.foundations.errors import UserError
from zerokit.foundations.utf8 import BadByte, bad_byte, iconv_fix
from zerokit.sources.data import PREPARED_NAME

SUFFIXES = (".jsonl", ".json", ".csv")
UTF16_MARKS = (codecs.BOM_UTF16_LE, codecs.BOM_UTF16_BE)


@dataclass(frozen=True)
class Line:
    number: int  # from 1, as an editor counts
    text: str  # bytes that are not UTF-8 read as U+FFFD
    bad: BadByte | None = None  # the first byte that is not UTF-8


def text_lines(path: Path) -> Iterator[Line]:
    """path's lines (a UTF-8 byte-order mark dropped). A file in UTF-16, every line of it unreadable, is refused."""
    data = path.read_bytes()
    if data.startswith(UTF16_MARKS) and b"\x00" in data[:4096]:
        raise UserError(f"{path} is UTF-16 (it starts with a UTF-16 byte-order mark): {iconv_fix(path, 'utf-16')}")
    offset = len(codecs.BOM_UTF8) if data.startswith(codecs.BOM_UTF8) else 0
    for number, raw in enumerate(data[offset:].splitlines(keepends=True), 1):
        line = raw.rstrip(b"\r\n")
        try:
            yield Line(number, line.decode("utf-8"))
        except UnicodeDecodeError as error:
            yield Line(number, line.decode("utf-8", "replace"), bad_byte(data, offset + error.start))
        offset += len(raw)


def utf8_text(path: Path, flag: str) -> str:
    """path's text; a byte that is not UTF-8 refused in one line, naming where."""
    data = path.read_bytes()
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as error:
        raise UserError(f"{flag} {path} is not UTF-8 at {bad_byte(data, error.start)}: {iconv_fix(path)}") from None


def records(path: Path, split: str, flag: str) -> Iterator[tuple[str, dict]]:
    """(where, row) for each row of path: `where` names the row for an error ("rows.jsonl:3", "data row 3")."""
    if not path.exists():
        raise UserError(f"{flag} {path} not found")
    if path.is_dir():
        yield from disk_records(path, split, flag)
    elif path.suffix in (".jsonl", ".json"):
        yield from json_records(path, flag)
    elif path.suffix == ".csv":
        handle = io.StringIO(utf8_text(path, flag), newline="")
        for number, row in enumerate(csv.DictReader(handle), 2):  # line 1 is the header
            yield f"{path}:{number}", row
    else:
        raise UserError(f"{flag} {path}: give a {'/'.join(SUFFIXES)} file or a save_to_disk folder")


def json_records(path: Path, flag: str) -> Iterator[tuple[str, dict]]:
    """Rows of a jsonl file (or of a .json file holding one list of objects), blank lines skipped."""
    text = utf8_text(path, flag)
    if path.suffix == ".json" and text.lstrip().startswith("["):
        for number, row in enumerate(parsed(text, path), 1):
            yield f"{path} row {number}", as_row(row, f"{path} row {number}")
        return
    for number, line in enumerate(text.splitlines(), 1):
        if line.strip():
            row = parsed(line, f"{path}:{number}")
            yield f"{path}:{number}", as_row(row, f"{path}:{number}")


def parsed(text: str, where: object) -> object:
    try:
        return json.loads(text)
    except (ValueError, RecursionError) as error:  # RecursionError: arrays nested past Python's stack
        raise UserError(f"{where} is not JSON ({error})") from None


def as_row(row: object, where: str) -> dict:
    if not isinstance(row, dict):
        raise UserError(f"{where}: a row must be a JSON object, got {type(row).__name__}")
    return row


def disk_records(folder: Path, split: str, flag: str) -> Iterator[tuple[str, dict]]:
    """Rows of a save_to_disk folder: a Dataset, or the split of a DatasetDict."""
    if (folder / PREPARED_NAME).is_file():
        raise UserError(
            f"{flag} {folder} was written by `prepare tokenize`: it holds token blocks, not prompts; give the "
            "text it was made from (a .jsonl/.csv file, or a save_to_disk folder)"
        )
    import datasets

    try:
        data = datasets.load_from_disk(str(folder))
    except FileNotFoundError:
        raise UserError(
            f"{flag} {folder} is no save_to_disk folder (no dataset_info.json or dataset_dict.json)"
        ) from None
    if isinstance(data, datasets.DatasetDict):
        if split not in data:
            raise UserError(f"{flag} {folder} has no split {split!r}: pass --split with one of {', '.join(data)}")
        data = data[split]
    for number, row in enumerate(data, 1):
        yield f"{folder} row {number}", row
