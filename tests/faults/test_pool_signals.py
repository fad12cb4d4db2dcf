"""Ctrl-C and SIGTERM while `prepare tokenize`'s pool of processes works: one line, 128 + the signal, the
workers silent, nothing published (issue 61: each worker printed its KeyboardInterrupt traceback, exit 1).

The signal goes to the command's whole process group, as a terminal's Ctrl-C goes to its foreground job and
as `kill -TERM -PGID` (or a scheduler ending a job) does.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.conftest import REPO, default_stop_signals
from zerokit.foundations.process_tree import descendants
from zerokit.sources.embedded import prepare_embedded


@pytest.fixture(scope="module")
def big_corpus(tmp_path_factory) -> tuple[Path, Path]:
    """A text file that two processes take several seconds to tokenize, and the embedded tokenizer."""
    folder = tmp_path_factory.mktemp("pool-signals")
    files, tokenizer = prepare_embedded(folder / "embedded")
    text = files["train"].read_text()
    corpus = folder / "big.txt"
    corpus.write_text(text * max(1, 40_000_000 // len(text)))
    return corpus, tokenizer


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
def test_a_stop_while_the_pool_tokenizes_ends_in_one_line(tmp_path: Path, zk_env, big_corpus, signum):
    corpus, tokenizer = big_corpus
    output = tmp_path / "prepared"
    argv = ["prepare", "tokenize", str(corpus), "--tokenizer", str(tokenizer), "--output", str(output)]
    process = subprocess.Popen(
        [sys.executable, "-m", "zerokit", *argv, "--num-proc", "2"],
        env=zk_env,
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,  # a group of its own, as a shell's foreground job
        preexec_fn=default_stop_signals,
    )
    try:
        deadline = time.monotonic() + 300
        while len(descendants(process.pid)) < 2:  # the pool's two workers
            assert process.poll() is None and time.monotonic() < deadline, "the pool never started"
            time.sleep(0.05)
        time.sleep(1)  # the workers at work
        os.killpg(process.pid, signum)
        _, stderr = process.communicate(timeout=120)
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
    name = signal.Signals(signum).name
    assert process.returncode == 128 + signum, stderr[-3000:]
    lines = [line for line in stderr.splitlines() if line.strip() and "tokenizing" not in line]
    assert lines[-1] == f"zerokit prepare: interrupted ({name})", stderr[-3000:]
    assert "Traceback" not in stderr and "KeyboardInterrupt" not in stderr, stderr[-3000:]
    assert not output.exists()  # nothing published
