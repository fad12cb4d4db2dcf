"""The rows of a dataset as users have them: a .jsonl/.json/.csv file, or a folder `datasets` saved with
save_to_disk. A folder `prepare tokenize` wrote holds token blocks, not text, and is refused."""

from __future__ import annotations

import csv
import json
from collections.abc import Iterator
from pathlib import Path

from zerokit.foundations.errors import UserError
from zerokit.sources.data import PREPARED_NAME

SUFFIXES = (".jsonl", ".json", ".csv")


def records(path: Path, split: str, flag: str) -> Iterator[tuple[str, dict]]:
    """(where, row) for each row of path: `where` names the row for an error ("rows.jsonl:3", "data row 3")."""
    if not path.exists():
        raise UserError(f"{flag} {path} not found")
    if path.is_dir():
        yield from disk_records(path, split, flag)
    elif path.suffix in (".jsonl", ".json"):
        yield from json_records(path)
    elif path.suffix == ".csv":
        with path.open(newline="", encoding="utf-8") as handle:
            for number, row in enumerate(csv.DictReader(handle), 2):  # line 1 is the header
                yield f"{path}:{number}", row
    else:
        raise UserError(f"{flag} {path}: give a {'/'.join(SUFFIXES)} file or a save_to_disk folder")


def json_records(path: Path) -> Iterator[tuple[str, dict]]:
    """Rows of a jsonl file (or of a .json file holding one list of objects), blank lines skipped."""
    text = path.read_text(encoding="utf-8")
    if path.suffix == ".json" and text.lstrip().startswith("["):
        for number, row in enumerate(json.loads(text), 1):
            yield f"{path} row {number}", as_row(row, f"{path} row {number}")
        return
    for number, line in enumerate(text.splitlines(), 1):
        if line.strip():
            try:
                row = json.loads(line)
            except ValueError as error:
                raise UserError(f"{path}:{number} is not JSON ({error})") from None
            yield f"{path}:{number}", as_row(row, f"{path}:{number}")


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
