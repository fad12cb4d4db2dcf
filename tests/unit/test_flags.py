"""Flags defined once (zerokit.foundations.flags): train's options from one dataclass, and ZEROKIT_<FLAG> read by
every command, the command line winning, a bad value refused in one line naming the variable."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.conftest import run_zerokit
from zerokit.foundations.errors import UserError
from zerokit.train.cli import parse


def test_train_options_come_from_flags_then_the_environment():
    options, hf = parse(["--output-dir", "runs/a", "--max_steps", "3"], {})
    assert (options.output_dir, options.config, options.overwrite, hf) == (
        Path("runs/a"),
        "zero2",
        False,
        ["--max_steps", "3"],
    )
    environ = {"ZEROKIT_OUTPUT_DIR": "runs/env", "ZEROKIT_OVERWRITE": "1", "ZEROKIT_CONFIG": "zero3"}
    options, _ = parse([], environ)
    assert (options.output_dir, options.overwrite, options.ds_config.name) == (Path("runs/env"), True, "zero3.json")
    options, _ = parse(["--output-dir", "runs/flag"], environ)
    assert options.output_dir == Path("runs/flag")  # the command line wins


def test_train_ignores_launchs_rank_count_variable():
    """launch's ZEROKIT_NPROC_PER_NODE reaches every rank it starts: train must not spawn again on it."""
    options, _ = parse([], {"ZEROKIT_NPROC_PER_NODE": "4"})
    assert options.nproc_per_node == 1


@pytest.mark.parametrize(
    ("environ", "message"),
    [
        ({"ZEROKIT_OVERWRITE": "maybe"}, "ZEROKIT_OVERWRITE='maybe': give 1 or 0"),
        ({"ZEROKIT_BLOCK_SIZE": "big"}, "ZEROKIT_BLOCK_SIZE='big' is not a valid int for --block-size"),
        ({"ZEROKIT_CONFIG": "zero9"}, "DeepSpeed config not found: zero9"),
    ],
)
def test_a_bad_value_names_the_variable(environ: dict[str, str], message: str):
    with pytest.raises(UserError, match=message):
        parse([], environ)


@pytest.mark.parametrize(
    ("argv", "environ", "message"),
    [
        (["train"], {"ZEROKIT_BLOCK_SIZE": "0"}, "--block-size must be at least 1"),
        (["generate", "model"], {"ZEROKIT_BATCH_SIZE": "0"}, "--batch-size must be at least 1"),
        (["bench"], {"ZEROKIT_STEPS": "3"}, "--steps 3 leaves nothing to time"),
        (  # required flags can come from the environment too
            ["prepare", "tokenize", "corpus.txt"],
            {"ZEROKIT_TOKENIZER": "tok", "ZEROKIT_OUTPUT": "out", "ZEROKIT_NUM_PROC": "0"},
            "--num-proc must be at least 1",
        ),
        (["launch", "train"], {"ZEROKIT_NPROC_PER_NODE": "0"}, "at least 1"),
    ],
)
def test_every_command_reads_its_flags_from_the_environment(tmp_path, zk_env, argv, environ, message):
    result = run_zerokit(argv, {**zk_env, **environ}, cwd=tmp_path)
    assert result.returncode == 2 and message in result.stderr, result.stderr[-2000:]
