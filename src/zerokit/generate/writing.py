"""Where finished rows go, as they finish: stdout, or an --output file that a stopped run can resume.

One writer per output (rank 0; ranks hand it their rows): a lock beside the output (the one
zerokit.outputs.ownership.built_beside takes) keeps a second run out, in one line. Rows are appended to a
sibling, `.NAME.partial`, one batch per write and fsync, so a run killed at any moment keeps every batch it
finished (a line torn by the kill is dropped when it resumes). When every row is done, the sibling, in
input order, replaces the output in one rename: the output file is only ever a whole result.
`--resume` keeps the rows of the sibling (or of a finished output) and generates the others; each row
carries its id (`row`), so no row is lost or doubled, whatever the ranks of either run.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import BinaryIO

from zerokit.foundations.errors import UserError
from zerokit.foundations.files import write_atomically
from zerokit.outputs.ownership import check_writable, lock_beside, release_beside

ROW_ID = "row"  # the field of an output row that holds its id: its index in the input
ERROR = "error"  # the field of an output row that has no answer: why (zerokit.generate.prompts.Row.error)


class StdoutRows:
    """Rows printed as they finish (no resume: nothing is kept)."""

    def __init__(self) -> None:
        self.done: dict[int, dict] = {}
        self.where = "stdout"

    def write(self, rows: list[dict]) -> None:
        sys.stdout.write("".join(json.dumps(row) + "\n" for row in rows))
        sys.stdout.flush()

    def finish(self) -> None:
        pass


class FileRows:
    """The rows of --output: those an earlier run finished (`done`, by id, with --resume), then the new ones."""

    def __init__(self, output: Path, *, resume: bool, overwrite: bool) -> None:
        self.output = output
        self.partial = output.with_name(f".{output.name}.partial")
        if not (resume or overwrite):
            if output.exists():
                raise UserError(f"output {output} exists: pick another --output, or pass --overwrite (or --resume)")
            if self.partial.exists():
                raise UserError(
                    f"{self.partial} holds the rows of an interrupted run of --output {output}: pass --resume to "
                    "keep them, or --overwrite to start again"
                )
        check_writable(output.parent, "--output")
        self.lock = lock_beside(output, "generate")  # a run that fails before the output is whole leaves no lock
        # --overwrite starts the partial rows again with its first write, so that a run refused before (a chat
        # template missing, say) leaves an interrupted run's rows as they were
        self.mode = "wb" if overwrite else "ab"
        if resume and not self.partial.exists() and output.is_file():
            write_atomically(self.partial, output.read_text())  # a finished output, given more rows to do
        self.done = read_done(self.partial) if resume else {}
        self.where = str(output)
        self.handle: BinaryIO | None = None  # opened with the first row: a run that fails before leaves no file

    def write(self, rows: list[dict]) -> None:
        """Append one batch in one write, on disk before the next batch starts."""
        if self.handle is None:
            self.handle = self.partial.open(self.mode)
        self.handle.write("".join(json.dumps(row) + "\n" for row in rows).encode())
        self.handle.flush()
        os.fsync(self.handle.fileno())

    def finish(self) -> None:
        """Every row is done: the output becomes the rows in input order, in one rename."""
        if self.handle is None:  # no row written: the partial as it is (--overwrite: emptied)
            self.handle = self.partial.open(self.mode)
        self.handle.close()
        rows = list(read_done(self.partial).values())
        rewritten = self.partial.read_bytes().count(b"\n") > len(rows)  # a row without an answer, answered later
        if rewritten or [row[ROW_ID] for row in rows] != sorted(row[ROW_ID] for row in rows):
            rows.sort(key=lambda row: row[ROW_ID])
            write_atomically(self.partial, "".join(json.dumps(row) + "\n" for row in rows))
        os.replace(self.partial, self.output)
        release_beside(self.output, self.lock)


def read_done(path: Path) -> dict[int, dict]:
    """The rows already in path, by id. A last line without its newline (the write a kill cut) is cut off the
    file; any other line that is not an output row means the file is not one: refused in one line."""
    if not path.is_file():
        return {}
    data = path.read_bytes()
    complete = data[: data.rfind(b"\n") + 1]
    if len(complete) < len(data):
        with path.open("r+b") as handle:
            handle.truncate(len(complete))
    done: dict[int, dict] = {}
    for number, line in enumerate(complete.decode().splitlines(), 1):
        try:
            row = json.loads(line)
            done[int(row[ROW_ID])] = row
        except (ValueError, KeyError, TypeError):
            raise UserError(
                f"{path}:{number} is not a row generate wrote (no `{ROW_ID}` id): pass --overwrite to start again"
            ) from None
    return done
