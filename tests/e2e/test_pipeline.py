"""`train --pp-size`: DeepSpeed's pipeline engine on real CPU gloo ranks follows the one-stage run of the same batches.

A pipeline cut in the wrong place, a stage fed another batch, a tied head whose two copies drift, or a
stage's weights saved under the wrong name would each part the losses or the saved model from the
one-stage run's. Each run is started once, in module-scoped fixtures, and the tests read what it left.
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
from tests.e2e.test_tensor_parallel import RTOL, TINY_LLAMA
from zerokit.outputs.checkpoints import newest_complete_checkpoint
from zerokit.train.callbacks.preemption import REQUEUE_EXIT_CODE

STEPS = 20


def llama_argv(output: Path, ranks: int, pp: int, *extra: str) -> list[str]:
    return [
        "train", "--config", "zero1", "--nproc-per-node", str(ranks), "--pp-size", str(pp),
        "--output-dir", str(output), "--model-type", "llama", "--config-overrides", TINY_LLAMA,
        "--block-size", "64", "--max_steps", str(STEPS), "--per_device_train_batch_size", "4",
        "--gradient_accumulation_steps", "2", "--learning_rate", "3e-3", "--logging_steps", "1", "--seed", "7", *extra,
    ]  # fmt: skip


def trained(argv: list[str], env: dict[str, str]):
    result = run_zerokit(argv, env)
    assert result.returncode == 0, result.stderr[-3000:]
    return result


@pytest.fixture(scope="module")
def one_stage(runs: Path, env) -> Path:
    """The whole model in one stage on 1 rank: global batch 8 in 2 micro-batches."""
    trained(llama_argv(runs / "pp1", 1, 1, "--save_strategy", "no"), env)
    return runs / "pp1"


@pytest.fixture(scope="module")
def two_stages(runs: Path, env):
    """2 stages on 2 ranks (DP=1), the same batches, each block's forward recomputed in the backward pass, an
    evaluation at step 10 between the training steps; checkpoints at steps 10 and 20."""
    extra = ["--save_steps", "10", "--gradient_checkpointing", "--eval_strategy", "steps", "--eval_steps", "10"]
    result = trained(llama_argv(runs / "pp2", 2, 2, *extra), env)
    return runs / "pp2", result.stdout


def losses_agree(got: list[float], want: list[float]) -> None:
    assert len(got) == len(want)
    worst = max(abs(g - w) / w for g, w in zip(got, want, strict=True))
    assert worst < RTOL, (worst, got, want)


def test_two_stages_log_the_losses_of_one_and_save_one_whole_model(one_stage: Path, two_stages):
    from transformers import AutoModelForCausalLM

    output, stdout = two_stages
    losses_agree(logged_losses(output), logged_losses(one_stage))
    assert len(logged_losses(output)) == STEPS
    assert "2 ranks = pipeline 2 stages x data parallel 1; global batch 8 = 4 per micro-batch x 2" in stdout
    assert json.loads((output / "zerokit-run.json").read_text())["parallelism"] == {"pp_size": 2, "dp_size": 1}
    assert sorted(p.name for p in output.glob("*.safetensors")) == ["model.safetensors"]
    split, whole = (AutoModelForCausalLM.from_pretrained(o).state_dict() for o in (output, one_stage))
    assert {k: v.shape for k, v in split.items()} == {k: v.shape for k, v in whole.items()}
    assert max((split[k] - whole[k]).abs().max().item() for k in whole) < 1e-4  # the same 20 steps
    history = json.loads((output / "trainer_state.json").read_text())["log_history"]
    assert [e["step"] for e in history if "eval_loss" in e] == [10, STEPS]  # during training, and at the end
    assert json.loads((output / "eval_results.json").read_text())["perplexity"] > 1


def test_sigterm_in_stages_checkpoints_and_resume_auto_continues_the_curve(runs: Path, env, two_stages, tmp_path):
    output, _ = two_stages
    preempted = runs / "preempted"
    argv = llama_argv(preempted, 2, 2, "--resume", "auto", "--save_strategy", "no")
    code, stderr = interrupted(argv, STEPS, 6, env, tmp_path, signal.SIGTERM)
    assert code == REQUEUE_EXIT_CODE and "Traceback" not in stderr, stderr[-3000:]
    step = int(re.search(r"SIGTERM received: checkpointing at step (\d+)", stderr).group(1))
    assert newest_complete_checkpoint(preempted) == preempted / f"checkpoint-{step}"
    result = trained(argv, env)
    assert f"resuming from {preempted / f'checkpoint-{step}'}" in result.stdout
    assert len(logged_losses(preempted)) == STEPS  # the log history goes on from the checkpoint's
    losses_agree(logged_losses(preempted)[step:], logged_losses(output)[step:])


def test_resuming_in_another_layout_is_refused_in_one_line(runs: Path, env, two_stages):
    output, _ = two_stages
    moved = runs / "moved"
    shutil.copytree(output / "checkpoint-10", moved / "checkpoint-10")
    argv = llama_argv(moved, 1, 1, "--resume", "auto")
    argv.remove("--pp-size")
    argv.remove("1")
    result = run_zerokit(argv, env)
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "was written with --pp-size 2 on 2 ranks, this run has no --pp-size" in lines[0]


def test_gpt2_with_its_tied_head_in_two_stages_by_two_replicas_follows_one_stage_by_two(runs: Path, env):
    """The embedded GPT-2 (head tied to the input embedding, first and last stage each hold a copy), no dropout."""
    common = [
        "train", "--config", "zero1", "--config-overrides", "n_layer=2,resid_pdrop=0,embd_pdrop=0,attn_pdrop=0",
        "--max_steps", "8", "--per_device_train_batch_size", "4", "--gradient_accumulation_steps", "2",
        "--logging_steps", "1", "--save_strategy", "no",
    ]  # fmt: skip
    four = trained([*common, "--pp-size", "2", "--nproc-per-node", "4", "--output-dir", str(runs / "gpt2-pp2")], env)
    assert "4 ranks = pipeline 2 stages x data parallel 2; global batch 16" in four.stdout
    trained([*common, "--pp-size", "1", "--nproc-per-node", "2", "--output-dir", str(runs / "gpt2-pp1")], env)
    losses_agree(logged_losses(runs / "gpt2-pp2"), logged_losses(runs / "gpt2-pp1"))
