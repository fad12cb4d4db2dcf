"""Mutated inputs at the door (issue 50): a DeepSpeed config or a prompts file cut short, holding values of the
wrong type, bytes that are not UTF-8 or a huge line, is read or refused in one line (a UserError), never another
exception. Seeded, so a failure names the case that made it."""

from __future__ import annotations

import json
import random
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from zerokit.foundations.errors import UserError
from zerokit.generate.options import parse
from zerokit.generate.prompts import read_rows
from zerokit.sources.ds_config_check import check_ds_config
from zerokit.sources.ds_configs import bundled

SEED = 50
VALUES = (None, True, 0, -1, 1.5, 10**30, "auto", "x", [], [1, "a"], {}, {"enabled": "yes"}, float("nan"))
HUGE = 1 << 20  # bytes in a huge line


def byte_mutations(data: bytes, rng: random.Random) -> Iterator[tuple[str, bytes]]:
    for _ in range(6):
        cut = rng.randrange(len(data))
        yield f"cut at {cut}", data[:cut]
        at = rng.randrange(len(data))
        yield f"\\xff\\xfe at {at}", data[:at] + b"\xff\xfe" + data[at:]
    yield "a huge line", data + b"x" * HUGE + b"\n"
    yield "nested past the stack", b"[" * 100_000
    yield "a number past the digit limit", b'{"steps_per_print": ' + b"9" * 5000 + b"}"
    yield "UTF-16", "\ufeff".encode("utf-16-le") + data.decode("utf-8", "replace").encode("utf-16-le")


def paths(value: object, path: tuple = ()) -> Iterator[tuple]:
    if isinstance(value, dict):
        for key, inner in value.items():
            yield (*path, key)
            yield from paths(inner, (*path, key))


def config_mutations(config: dict, rng: random.Random) -> Iterator[tuple[str, bytes]]:
    """The config with one value of another type, or one key misspelt, then its bytes mutated."""
    where = list(paths(config))
    for _ in range(40):
        path, value, changed = rng.choice(where), rng.choice(VALUES), json.loads(json.dumps(config))
        parent = changed
        for key in path[:-1]:
            parent = parent[key]
        if rng.random() < 0.2:
            parent[path[-1][:-1] or "x"] = parent.pop(path[-1])
            yield f"{'.'.join(path)} misspelt", json.dumps(changed).encode()
        else:
            parent[path[-1]] = value
            yield f"{'.'.join(path)} = {value!r}", json.dumps(changed).encode()
    yield from byte_mutations(json.dumps(config, indent=1).encode(), rng)


def read_or_refused(read: Callable[[Path], object], path: Path, case: str) -> None:
    try:
        read(path)
    except UserError as error:
        assert "\n" not in str(error), f"{case}: {error}"
    except Exception as error:
        pytest.fail(f"{case}: {type(error).__name__}: {error}")


def test_the_deepspeed_config_check_reads_or_refuses_in_one_line(tmp_path: Path):
    pytest.importorskip("deepspeed")
    rng = random.Random(SEED)
    path = tmp_path / "ds.json"
    for name in ("zero2", "zero3-offload"):
        for case, data in config_mutations(json.loads(bundled(name).read_text()), rng):
            path.write_bytes(data)
            read_or_refused(check_ds_config, path, f"{name}: {case}")


@pytest.mark.parametrize("flag", ["--prompts-file", "--jsonl"])
def test_the_prompts_reader_reads_or_refuses_in_one_line(tmp_path: Path, flag: str):
    rng = random.Random(SEED)
    rows = [{"prompt": "the cat sat", "id": 1}, {"prompt": "café au lait", "max_new_tokens": 3}, {"prompt": 7}]
    suffix, text = (
        (".txt", "the cat sat\ncafé au lait\n\n  spaced  \n")
        if flag == "--prompts-file"
        else (".jsonl", "".join(json.dumps(row) + "\n" for row in rows))
    )
    path = tmp_path / f"prompts{suffix}"
    for case, data in byte_mutations(text.encode(), rng):
        path.write_bytes(data)
        read_or_refused(lambda p: read_rows(parse(["model", flag, str(p)])), path, f"{flag}: {case}")
