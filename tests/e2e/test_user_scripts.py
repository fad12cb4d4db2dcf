"""Users' own HF and accelerate scripts, unmodified (tests/users: they import nothing of zerokit), under
`launch` on 2 CPU ranks with ZeRO: one job of 2 ranks (each reports world size 2), loss falling. Each run about 20 s.

Measured before zerokit.launch.rank.user_script: with --deepspeed every rank failed in DeepSpeed's batch assertion;
without --use_cpu each rank trained alone (world size 1) into the same folder.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import REPO, isolated_env, run_bounded

USERS = REPO / "tests" / "users"
LOSS = re.compile(r"'loss': '?([0-9.]+)")


@pytest.fixture(scope="module")
def inputs(tmp_path_factory) -> dict[str, str]:
    """The embedded corpus, a tokenizer trained on it, and a tiny GPT-2 config (what a user would download)."""
    from transformers import AutoTokenizer

    from zerokit.sources.embedded import model_config, prepare_embedded
    from zerokit.train.model.loading import fit_to_tokenizer

    folder = tmp_path_factory.mktemp("user-inputs")
    files, tokenizer = prepare_embedded(folder)
    fit_to_tokenizer(model_config(), AutoTokenizer.from_pretrained(tokenizer)).save_pretrained(folder / "config")
    return {"train": str(files["train"]), "tokenizer": str(tokenizer), "config": str(folder / "config")}


def launch(argv: list[str], env: dict[str, str], cwd: Path) -> subprocess.CompletedProcess:
    return run_bounded(
        [sys.executable, "-m", "zerokit", "launch", "--nproc-per-node", "2", "--no-preflight", *argv],
        env={**env, "OMP_NUM_THREADS": "1"},
        cwd=cwd,
        timeout=600,
    )


def assert_one_job_learning(result: subprocess.CompletedProcess, name: str) -> list[float]:
    """One job of 2 ranks whose loss fell by a tenth at least; returns the logged losses."""
    log = result.stdout + result.stderr
    assert result.returncode == 0, log[-4000:]
    # Found anywhere in the log, not as whole lines: the ranks share one pipe, and print() writes its text and
    # its newline apart, so one rank's line can land inside another's (seen in CI).
    assert all(f"{name}: rank {r} of world size 2" in log for r in (0, 1)), log[-3000:]
    losses = [float(x) for x in LOSS.findall(result.stdout)]
    assert len(losses) >= 4 and losses[-1] < 0.9 * losses[0], losses
    return losses


def clm_argv(inputs: dict[str, str], output: Path) -> list[str]:
    return [
        str(USERS / "run_clm.py"), "--config_name", inputs["config"], "--tokenizer_name", inputs["tokenizer"],
        "--train_file", inputs["train"], "--block_size", "64", "--do_train", "--max_steps", "12",
        "--logging_steps", "3", "--per_device_train_batch_size", "4", "--learning_rate", "5e-3",
        "--report_to", "none", "--save_strategy", "no", "--output_dir", str(output),
    ]  # fmt: skip


@pytest.fixture(scope="module")
def clm_with_use_cpu(inputs, tmp_path_factory) -> list[float]:
    """run_clm with --deepspeed zero3.json --use_cpu, as a CPU user writes it: the losses the other runs meet."""
    tmp = tmp_path_factory.mktemp("clm-use-cpu")
    env = isolated_env(tmp)
    argv = [*clm_argv(inputs, tmp / "out"), "--deepspeed", str(REPO / "configs/zero3.json"), "--use_cpu"]
    losses = assert_one_job_learning(launch(["--", "python", *argv], env, tmp), "run_clm")
    assert (tmp / "out" / "model.safetensors").is_file()
    return losses


def test_run_clm_with_deepspeed_and_use_cpu_trains_as_one_job(clm_with_use_cpu):
    assert len(clm_with_use_cpu) == 4  # 12 steps, logged every 3


def test_run_clm_written_for_gpu_nodes_trains_the_same_job(inputs, zk_env, tmp_path, clm_with_use_cpu):
    """--deepspeed without --use_cpu (written for GPU nodes): the bootstrap makes it the same CPU job."""
    argv = [*clm_argv(inputs, tmp_path / "out"), "--deepspeed", str(REPO / "configs/zero3.json")]
    losses = assert_one_job_learning(launch(["--", "python", *argv], zk_env, tmp_path), "run_clm")
    assert losses == pytest.approx(clm_with_use_cpu, rel=1e-5)
    assert (tmp_path / "out" / "model.safetensors").is_file()


def test_run_clm_without_deepspeed_trains_as_one_job(inputs, zk_env, tmp_path):
    """No DeepSpeed, no --use_cpu: before the bootstrap, 2 lone trainings into one folder."""
    result = launch(["--", "python", *clm_argv(inputs, tmp_path / "out")], zk_env, tmp_path)
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


@pytest.mark.parametrize(
    ("argv", "environ"),
    [
        (["--zero-stage", "2"], {}),  # a DeepSpeedPlugin in the code
        (
            [],
            {"ACCELERATE_USE_DEEPSPEED": "true", "ACCELERATE_DEEPSPEED_CONFIG_FILE": "ds.json"},
        ),  # as accelerate launch
    ],
    ids=["plugin-zero2", "environment-zero3"],
)
def test_an_accelerate_loop_trains_with_deepspeed_as_one_job(zk_env, tmp_path, argv, environ):
    """A user's own Accelerator loop on CPU ranks: before the bootstrap gave accelerate a backend, DeepSpeed's
    batch check failed (4 != 4 * 1 * 2); with cpu=True, DeepSpeed was dropped."""
    (tmp_path / "ds.json").write_text(
        '{"zero_optimization": {"stage": 3}, "train_micro_batch_size_per_gpu": "auto", "train_batch_size": "auto"}'
    )
    result = launch(["--", "python", str(USERS / "accelerate_loop.py"), *argv], {**zk_env, **environ}, tmp_path)
    assert_one_job_learning(result, "accelerate_loop")
    assert "accelerate_loop: deepspeed True" in result.stdout.splitlines(), result.stdout[-2000:]
