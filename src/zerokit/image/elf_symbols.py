"""A shared object's exported symbols, and the string a pointer symbol points at, read from its bytes.

The runtime image has no binutils (no `nm`, `readelf`), and loading a library to look runs its constructors and
needs its dependencies first; NCCL's net plugin is judged before any of that. 64-bit little-endian ELF only
(x86-64, aarch64): what the images run on.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator
from dataclasses import dataclass

SHT_RELA, SHT_DYNSYM, SHT_NOBITS = 4, 11, 8
RELATIVE = {62: 8, 183: 1027}  # e_machine -> R_*_RELATIVE: x86-64's and aarch64's


@dataclass(frozen=True)
class Section:
    kind: int
    address: int
    offset: int
    size: int
    link: int


def sections(data: bytes) -> list[Section]:
    if data[:4] != b"\x7fELF" or data[4] != 2 or data[5] != 1:
        raise ValueError("not a 64-bit little-endian ELF file")
    offset = struct.unpack_from("<Q", data, 0x28)[0]
    size, count = struct.unpack_from("<HH", data, 0x3A)
    rows = (struct.unpack_from("<IIQQQQII", data, offset + i * size) for i in range(count))
    return [Section(kind, address, where, length, link) for _, kind, _, address, where, length, link, _ in rows]


def dynamic_symbols(data: bytes) -> dict[str, int]:
    """Name -> address of each symbol the object defines and exports (its .dynsym, less the undefined)."""
    table = sections(data)
    found = {}
    for section in (s for s in table if s.kind == SHT_DYNSYM):
        names = table[section.link]
        for at in range(section.offset, section.offset + section.size, 24):
            name, _, _, index, value, _ = struct.unpack_from("<IBBHQQ", data, at)
            if index != 0 and name:
                end = data.index(b"\0", names.offset + name)
                found[data[names.offset + name : end].decode()] = value
    return found


def file_offset(table: list[Section], address: int) -> int | None:
    for s in table:
        if s.kind != SHT_NOBITS and s.address and s.address <= address < s.address + s.size:
            return s.offset + address - s.address
    return None


def relocations(data: bytes, table: list[Section]) -> Iterator[tuple[int, int, int]]:
    """(offset, type, addend) of every RELA relocation."""
    for section in (s for s in table if s.kind == SHT_RELA):
        for at in range(section.offset, section.offset + section.size, 24):
            where, info, addend = struct.unpack_from("<QQq", data, at)
            yield where, info & 0xFFFFFFFF, addend


def pointed_string(data: bytes, address: int) -> str | None:
    """The C string that the pointer stored at ADDRESS points at (a struct's first `const char*` field), as the
    loader would relocate it; None when it cannot be told from the file."""
    table = sections(data)
    relative = RELATIVE.get(struct.unpack_from("<H", data, 0x12)[0])
    target = next((add for where, kind, add in relocations(data, table) if where == address and kind == relative), None)
    if target is None:
        at = file_offset(table, address)
        target = struct.unpack_from("<Q", data, at)[0] if at is not None else None
    start = file_offset(table, target) if target else None
    if start is None:
        return None
    return data[start : data.index(b"\0", start)].decode(errors="replace")
