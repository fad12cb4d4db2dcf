"""One writer per output, through the real `prepare tokenize`: a second writer fails at once in one line,
and a full file system (a real tmpfs) is one line naming it, the partial output removed, nothing else
touched. (zerokit.outputs.ownership.built_beside; generate --output and universal use the same.)"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from tests.conftest import run_zerokit
from zerokit.outputs import ownership


@pytest.fixture(scope="module")
def tokenize(tmp_path_factory) -> list[str]:
    """`prepare tokenize CORPUS --tokenizer T --block-size 32`: a generated corpus, the embedded tokenizer."""
    from zerokit.sources.embedded import prepare_embedded

    folder = tmp_path_factory.mktemp("prepare")
    _, tokenizer = prepare_embedded(folder / "embedded")
    corpus = folder / "corpus.txt"
    corpus.write_text("".join(f"the cat {i} sat on the mat {i * 7} .\n" for i in range(3000)))
    return ["prepare", "tokenize", str(corpus), "--tokenizer", str(tokenizer), "--block-size", "32", "--num-proc", "1"]


def error_line(result: subprocess.CompletedProcess) -> str:
    """The one error line (datasets' progress bars aside), with no traceback."""
    errors = [line for line in result.stderr.splitlines() if line.startswith("error: ")]
    assert result.returncode != 0 and len(errors) == 1, result.stderr[-3000:]
    assert "Traceback" not in result.stderr, result.stderr[-3000:]
    return errors[0]


def test_a_second_writer_of_an_output_fails_at_once(tmp_path: Path, zk_env, tokenize: list[str]):
    output = tmp_path / "blocks"
    with ownership.built_beside(output, "prepare tokenize", "--output") as partial:  # the first writer: this test
        result = run_zerokit([*tokenize, "--output", str(output)], zk_env, timeout=120)
        partial.mkdir()
    assert f"is being written by another run (prepare tokenize, pid {os.getpid()} on" in error_line(result)
    assert [p.name for p in tmp_path.iterdir()] == ["blocks"]  # the first writer's result, nothing of the second


@pytest.fixture
def full_disk(tmp_path: Path):
    """A 512 KiB tmpfs: too small for the blocks of the corpus. Needs root (CI runs as root)."""
    mount = tmp_path / "small"
    mount.mkdir()
    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root")
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=512k", "zerokit-full", str(mount)], check=True)
    yield mount
    subprocess.run(["umount", str(mount)], check=True)


def test_a_full_file_system_is_one_line_and_leaves_nothing_partial(full_disk: Path, zk_env, tokenize: list[str]):
    mine = full_disk / "notes.txt"
    mine.write_text("the user's")
    result = run_zerokit([*tokenize, "--output", str(full_disk / "blocks")], zk_env, timeout=300)
    line = error_line(result)
    assert f"no space left on the file system at {full_disk} while writing {full_disk / 'blocks'}" in line
    assert sorted(p.name for p in full_disk.iterdir()) == ["notes.txt"] and mine.read_text() == "the user's"
