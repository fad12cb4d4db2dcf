"""`train --tp-size 2`: DeepSpeed AutoTP on real CPU gloo ranks follows the TP=1 run of the same global batch.

A tiny Llama (4 heads, 2 key-value heads, hidden 64: AutoTP cannot split the embedded GPT-2) on the
embedded corpus, 20 steps. Each TP group shares one batch, so TP=2 x DP=1 on 2 ranks must log the losses
of TP=1 on 1 rank, and TP=2 x DP=2 on 4 ranks (4 rows each) those of TP=1 on 1 rank too (were a group's ranks fed
different batches, their all-reduces would mix them and the losses part). Each run is started once, in
module-scoped fixtures, and the tests read what it left.
"""

from __future__ import annotations

import json
import re
import shutil
import signal
from pathlib import Path

import pytest

from tests.conftest import logged_losses, run_zerokit
from tests.e2e.test_preemption import interrupted
from zerokit.outputs.checkpoints import newest_complete_checkpoint
from zerokit.train.callbacks.preemption import REQUEUE_EXIT_CODE

STEPS = 20
TINY_LLAMA = (
    "hidden_size=64,intermediate_size=128,num_hidden_layers=2,num_attention_heads=4,"
    "num_key_value_heads=2,max_position_embeddings=64"
)
RTOL = 1e-4


def train_argv(output: Path, ranks: int, tp: int, *extra: str) -> list[str]:
    return [
        "train", "--config", "zero2", "--nproc-per-node", str(ranks), "--tp-size", str(tp),
        "--output-dir", str(output), "--model-type", "llama", "--config-overrides", TINY_LLAMA,
        "--block-size", "64", "--max_steps", str(STEPS), "--per_device_train_batch_size", "8",
        "--learning_rate", "3e-3", "--logging_steps", "1", "--seed", "7", *extra,
    ]  # fmt: skip


def trained(runs: Path, env: dict[str, str], name: str, ranks: int, tp: int, *extra: str):
    result = run_zerokit(train_argv(runs / name, ranks, tp, *extra), env)
    assert result.returncode == 0, result.stderr[-3000:]
    return result


@pytest.fixture(scope="module")
def tp1(runs: Path, env) -> Path:
    """TP=1 on 1 rank: global batch 8."""
    trained(runs, env, "tp1", 1, 1, "--save_strategy", "no")
    return runs / "tp1"


@pytest.fixture(scope="module")
def tp2(runs: Path, env):
    """TP=2 on 2 ranks (DP=1): global batch 8; checkpoints at steps 10 and 20."""
    result = trained(runs, env, "tp2", 2, 2, "--save_strategy", "steps", "--save_steps", "10")
    return runs / "tp2", result.stdout


def losses_agree(got: list[float], want: list[float]) -> None:
    assert len(got) == len(want) == STEPS
    worst = max(abs(g - w) / w for g, w in zip(got, want, strict=True))
    assert worst < RTOL, (worst, got, want)


def test_tp2_on_2_ranks_logs_the_losses_of_tp1_on_1_rank(tp1: Path, tp2):
    output, stdout = tp2
    losses_agree(logged_losses(output), logged_losses(tp1))
    assert "2 ranks = tensor parallel 2 x data parallel 1; global batch 8 = 8 per rank" in stdout
    record = json.loads((output / "zerokit-run.json").read_text())
    assert record["parallelism"] == {"tp_size": 2, "dp_size": 1}
    assert record["deepspeed"]["zerokit_changes"]["tensor_parallel.autotp_size"] == 2


def test_the_tp2_model_is_saved_whole_and_loads(tp1: Path, tp2):
    from transformers import AutoModelForCausalLM

    output, _ = tp2
    assert sorted(p.name for p in output.glob("*.safetensors")) == ["model.safetensors"]
    split, whole = (AutoModelForCausalLM.from_pretrained(o).state_dict() for o in (output, tp1))
    assert {k: v.shape for k, v in split.items()} == {k: v.shape for k, v in whole.items()}
    worst = max((split[k] - whole[k]).abs().max().item() for k in whole)
    assert worst < 1e-4, worst  # the same weights: the same 20 steps


def test_sigterm_under_tp_checkpoints_and_resume_auto_continues_the_curve(runs: Path, env, tp2, tmp_path: Path):
    """Preemption under TP=2: SIGTERM to the launcher, the step's checkpoint, the requeue code; the resumed run
    logs the uninterrupted one's losses."""
    output, _ = tp2
    preempted = runs / "preempted"
    argv = train_argv(preempted, 2, 2, "--resume", "auto", "--save_strategy", "no")
    code, stderr = interrupted(argv, STEPS, 6, env, tmp_path, signal.SIGTERM)
    assert code == REQUEUE_EXIT_CODE and "Traceback" not in stderr, stderr[-3000:]
    step = int(re.search(r"SIGTERM received: checkpointing at step (\d+)", stderr).group(1))
    assert newest_complete_checkpoint(preempted) == preempted / f"checkpoint-{step}"
    trained(runs, env, "preempted", 2, 2, "--resume", "auto", "--save_strategy", "no")
    resumed = json.loads((preempted / "trainer_state.json").read_text())["log_history"]
    after = [e["loss"] for e in resumed if "loss" in e and e["step"] > step]
    want = logged_losses(output)[step:]
    assert len(after) == STEPS - step
    assert max(abs(g - w) / w for g, w in zip(after, want, strict=True)) < RTOL, (after, want)


def test_a_tp2_checkpoint_converted_to_universal_resumes_at_tp1(runs: Path, env, tp2):
    """`zerokit universal` re-splits a TP=2 checkpoint's layers: 1 rank at TP=1 resumes it on the same curve."""
    output, _ = tp2
    moved = runs / "moved"
    shutil.copytree(output / "checkpoint-10", moved / "checkpoint-10")
    result = run_zerokit(["universal", str(moved / "checkpoint-10")], env)
    assert result.returncode == 0, result.stderr[-3000:]
    result = trained(runs, env, "moved", 1, 1, "--resume", "auto", "--save_strategy", "no")
    assert "(its universal form: another rank count)" in result.stdout
    resumed = json.loads((moved / "trainer_state.json").read_text())["log_history"]
    after = [e["loss"] for e in resumed if "loss" in e and e["step"] > 10]
    want = logged_losses(output)[10:]
    assert max(abs(g - w) / w for g, w in zip(after, want, strict=True)) < RTOL, (after, want)


def test_tp2_by_dp2_on_4_ranks_logs_the_losses_of_tp1_on_1_rank(runs: Path, env, tp1: Path):
    """Two TP groups of 2, 4 rows each: the data-parallel pair's global batch of 8 is TP=1's batch of 8 on 1 rank,
    split between ZeRO's DP ranks (were a group's ranks fed different rows, their all-reduces would mix them)."""
    result = trained(runs, env, "tp2dp2", 4, 2, "--save_strategy", "no", "--per_device_train_batch_size", "4")
    assert "4 ranks = tensor parallel 2 x data parallel 2; global batch 8 = 4 per rank" in result.stdout
    losses_agree(logged_losses(runs / "tp2dp2"), logged_losses(tp1))


def test_a_model_tp_cannot_split_evenly_is_refused_on_every_rank_before_anything_is_written(runs: Path, env):
    out = runs / "refused"
    overrides = TINY_LLAMA.replace("num_key_value_heads=2", "num_key_value_heads=1")
    argv = train_argv(out, 2, 2)
    argv[argv.index(TINY_LLAMA)] = overrides
    result = run_zerokit(argv, env)
    errors = [line for line in result.stderr.splitlines() if line.startswith("error: ")]
    assert result.returncode == 2, result.stderr[-3000:]
    assert errors == ["error: --tp-size 2 does not divide the model's 1 key-value heads (num_key_value_heads): "
                      "each rank takes an equal share; pick a --tp-size that divides it"]  # fmt: skip
    assert "Traceback" not in result.stderr and not out.exists()
