"""Users' own HF scripts, unmodified (tests/users: they import nothing of zerokit), under `launch` on 2 CPU
ranks with ZeRO-3: one job of 2 ranks (each reports world size 2), loss falling. Each run about 20 s.

Measured before zerokit.launch.user_script: with --deepspeed every rank failed in DeepSpeed's batch assertion;
without --use_cpu each rank trained alone (world size 1) into the same folder.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import REPO

USERS = REPO / "tests" / "users"
LOSS = re.compile(r"'loss': '?([0-9.]+)")


@pytest.fixture(scope="module")
def inputs(tmp_path_factory) -> dict[str, str]:
    """The embedded corpus, a tokenizer trained on it, and a tiny GPT-2 config (what a user would download)."""
    from transformers import AutoTokenizer

    from zerokit.embedded import model_config, prepare_embedded
    from zerokit.train.model import fit_to_tokenizer

    folder = tmp_path_factory.mktemp("user-inputs")
    files, tokenizer = prepare_embedded(folder)
    fit_to_tokenizer(model_config(), AutoTokenizer.from_pretrained(tokenizer)).save_pretrained(folder / "config")
    return {"train": str(files["train"]), "tokenizer": str(tokenizer), "config": str(folder / "config")}


def launch(argv: list[str], env: dict[str, str], cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "zerokit", "launch", "--nproc-per-node", "2", "--no-preflight", *argv],
        env={**env, "OMP_NUM_THREADS": "1"},
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=600,
    )


def assert_one_job_learning(result: subprocess.CompletedProcess, name: str) -> None:
    log = result.stdout + result.stderr
    assert result.returncode == 0, log[-4000:]
    assert {f"{name}: rank {r} of world size 2" for r in (0, 1)} <= set(log.splitlines()), log[-3000:]
    losses = [float(x) for x in LOSS.findall(result.stdout)]
    assert len(losses) >= 4 and losses[-1] < losses[0], losses


def clm_argv(inputs: dict[str, str], output: Path) -> list[str]:
    return [
        str(USERS / "run_clm.py"), "--config_name", inputs["config"], "--tokenizer_name", inputs["tokenizer"],
        "--train_file", inputs["train"], "--block_size", "64", "--do_train", "--max_steps", "12",
        "--logging_steps", "3", "--per_device_train_batch_size", "4", "--learning_rate", "5e-3",
        "--report_to", "none", "--save_strategy", "no", "--output_dir", str(output),
    ]  # fmt: skip


@pytest.mark.parametrize(
    "extra",
    [
        ["--deepspeed", str(REPO / "configs/zero3.json"), "--use_cpu"],
        ["--deepspeed", str(REPO / "configs/zero3.json")],  # written for GPU nodes
        [],  # no DeepSpeed, no --use_cpu: before, 2 lone trainings
    ],
    ids=["deepspeed-use_cpu", "deepspeed", "plain"],
)
def test_run_clm_trains_as_one_job(inputs, zk_env, tmp_path, extra):
    result = launch(["--", "python", *clm_argv(inputs, tmp_path / "out"), *extra], zk_env, tmp_path)
    assert_one_job_learning(result, "run_clm")
    assert (tmp_path / "out" / "model.safetensors").is_file()


def test_tutorial_script_with_a_deepspeed_dict_trains_on_two_ranks(inputs, zk_env, tmp_path):
    """TrainingArguments(deepspeed=dict) with train_batch_size 8 = 4 x 1 x 2 ranks, run as `launch script.py`."""
    argv = [str(USERS / "tutorial_trainer.py"), "--model_config", inputs["config"], "--tokenizer",
            inputs["tokenizer"], "--train_file", inputs["train"], "--max_steps", "20", "--output_dir",
            str(tmp_path / "out")]  # fmt: skip
    assert_one_job_learning(launch(argv, zk_env, tmp_path), "tutorial")


def test_a_fixed_batch_size_the_ranks_cannot_make_stops_before_they_start(zk_env, tmp_path):
    config = tmp_path / "ds.json"
    config.write_text('{"train_batch_size": 8, "zero_optimization": {"stage": 3}}')
    argv = ["--", "python", str(USERS / "run_clm.py"), "--deepspeed", str(config), "--per_device_train_batch_size",
            "2", "--output_dir", str(tmp_path / "out")]  # fmt: skip
    result = launch(argv, zk_env, tmp_path)
    assert result.returncode != 0
    assert result.stderr.strip().splitlines() == [
        f"error: {config} fixes train_batch_size at 8, but this job makes 2 per rank x 1 accumulation step(s) "
        'x 2 rank(s) = 4: set it to "auto", or start 4 ranks'
    ]
    assert "rank 0" not in result.stderr and not (tmp_path / "out").exists()
