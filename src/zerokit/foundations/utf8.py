"""Where a file's bytes stop being UTF-8, said as a user finds it (line, byte of the line, byte of the file), and the
command that converts the file."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class BadByte:
    line: int  # from 1, as an editor counts
    column: int  # the byte's offset in its line, from 0
    offset: int  # the byte's offset in the file, from 0 (`cmp`, `xxd -s`)
    value: int

    def __str__(self) -> str:
        return f"line {self.line}, byte {self.column} (byte {self.offset} of the file: 0x{self.value:02x})"


def bad_byte(data: bytes, offset: int) -> BadByte:
    """The byte at offset of data (the first a UTF-8 decoder refused: UnicodeDecodeError.start), placed."""
    line_start = data.rfind(b"\n", 0, offset) + 1
    return BadByte(data.count(b"\n", 0, offset) + 1, offset - line_start, offset, data[offset])


def iconv_fix(path: Path, encoding: str | None = None) -> str:
    """The fix for a file saved in another encoding (when not known, the one it was saved in): convert it."""
    converted = path.with_name(f"{path.stem}.utf8{path.suffix}")
    fix = f"convert it to UTF-8: iconv -f {encoding or 'ENCODING'} -t utf-8 {path} > {converted}"
    return fix if encoding else f"{fix} (ENCODING: the one it was saved in, e.g. latin1 or cp1252)"
