"""`prepare tokenize` once, then 2-rank training from the prepared folder: no rank tokenizes, same losses.

The reference is the same training from the raw text (train tokenizes it itself), same seed.
"""

from __future__ import annotations

import json
from pathlib import Path

from tests.conftest import logged_losses, run_zerokit
from zerokit.sources.data import PREPARED_NAME
from zerokit.sources.embedded import prepare_embedded

MODEL = ["--model-type", "gpt2", "--config-overrides", "n_layer=2,n_head=4,n_embd=128,n_positions=64"]


def train_argv(dataset: Path, tokenizer: Path, output: Path) -> list[str]:
    return [
        "train",
        *MODEL,
        "--tokenizer",
        str(tokenizer),
        "--dataset",
        str(dataset),
        "--config",
        "zero2",
        "--nproc-per-node",
        "2",
        "--output-dir",
        str(output),
        "--max_steps",
        "12",
        "--logging_steps",
        "1",
        "--learning_rate",
        "3e-3",
        "--per_device_train_batch_size",
        "8",
    ]


def tokenize_argv(corpus: Path, tokenizer: Path, output: Path) -> list[str]:
    return ["prepare", "tokenize", str(corpus), "--tokenizer", str(tokenizer), "--output", str(output)]


def test_train_from_a_prepared_folder_matches_training_from_raw_text(tmp_path: Path, zk_env):
    files, tokenizer = prepare_embedded(tmp_path / "embedded")
    corpus = files["train"].parent  # a folder of .txt files
    prepared = tmp_path / "prepared"

    result = run_zerokit(
        [*tokenize_argv(corpus, tokenizer, prepared), "--block-size", "64", "--num-proc", "2"],
        zk_env,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    info = json.loads((prepared / PREPARED_NAME).read_text())
    assert info["block_size"] == 64 and info["blocks"]["train"] > 100 and "validation" in info["blocks"]
    assert "tokenizing" in result.stderr  # the progress bar

    again = run_zerokit(tokenize_argv(corpus, tokenizer, prepared), zk_env)
    assert again.returncode == 2 and "--overwrite" in again.stderr  # never replaced unasked

    from_prepared = run_zerokit(train_argv(prepared, tokenizer, tmp_path / "from-prepared"), zk_env)
    assert from_prepared.returncode == 0, from_prepared.stderr[-3000:]
    for rank in (0, 1):
        assert f"zerokit: rank {rank}: dataset {prepared} is pre-tokenized" in from_prepared.stdout
    assert "tokenizing" not in from_prepared.stderr and "grouping" not in from_prepared.stderr

    raw_env = {**zk_env, "HF_HOME": str(tmp_path / "hf-raw")}  # no datasets cache from prepare's own run
    from_raw = run_zerokit([*train_argv(corpus, tokenizer, tmp_path / "from-raw"), "--block-size", "64"], raw_env)
    assert from_raw.returncode == 0, from_raw.stderr[-3000:]
    assert "tokenizing" in from_raw.stderr

    losses = logged_losses(tmp_path / "from-prepared")
    assert len(losses) == 12 and losses == logged_losses(tmp_path / "from-raw")


def test_streaming_tokenizes_while_training_and_writes_nothing(tmp_path: Path, zk_env):
    files, tokenizer = prepare_embedded(tmp_path / "embedded")
    argv = [*train_argv(files["train"].parent, tokenizer, tmp_path / "run"), "--streaming", "--max_steps", "6"]
    result = run_zerokit(argv, zk_env)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "tokenized while training, nothing written" in result.stdout
    assert len(logged_losses(tmp_path / "run")) == 6
    assert "tokenizing" not in result.stderr and not list(Path(zk_env["HF_HOME"]).rglob("*.arrow"))
