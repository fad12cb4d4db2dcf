"""`train --sp-size 2`: DeepSpeed Ulysses on real CPU gloo ranks logs the losses of one rank given the whole blocks.

A tiny Llama (4 heads, 2 key-value heads) saved once with the embedded tokenizer, so that every run starts from the
same weights (a fresh model under ZeRO-3 is initialised partitioned, from other random numbers): one rank under
ZeRO-2, then SP=2 on 2 ranks under ZeRO-2 and under ZeRO-3, the same global batch of 8, 10 steps, fp32. The two
ranks of a group share each batch, each holding half of its tokens, so their losses must be one rank's (within
1e-4 relative, issue 59). The ZeRO-2 run's checkpoint is resumed without sequence parallelism (2 data-parallel
ranks of 4 each: the same global batch) and continues its curve. The refusals: tests/unit/test_sequence_parallel.py.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.conftest import isolated_env, logged_losses, run_zerokit

STEPS = 10
RTOL = 1e-4


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("sequence-parallel")


@pytest.fixture(scope="module")
def env(runs: Path) -> dict[str, str]:
    return isolated_env(runs)


@pytest.fixture(scope="module")
def llama(runs: Path) -> Path:
    """A fresh tiny Llama and the embedded tokenizer, in one folder."""
    import torch
    from transformers import AutoTokenizer, LlamaConfig, LlamaForCausalLM

    from zerokit.sources.embedded import prepare_embedded

    _, tokenizer_dir = prepare_embedded(runs / "embedded")
    tokenizer = AutoTokenizer.from_pretrained(tokenizer_dir)
    torch.manual_seed(0)
    config = LlamaConfig(
        vocab_size=len(tokenizer), hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, max_position_embeddings=64,
    )  # fmt: skip
    folder = runs / "llama"
    LlamaForCausalLM(config).save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


def train(runs: Path, env: dict[str, str], llama: Path, name: str, *flags: str):
    argv = ["train", "--model", str(llama), "--output-dir", str(runs / name), "--block-size", "64", "--max_steps",
            str(STEPS), "--learning_rate", "3e-3", "--logging_steps", "1", "--seed", "7", *flags]  # fmt: skip
    result = run_zerokit(argv, env)
    assert result.returncode == 0, result.stderr[-3000:]
    return runs / name, result.stdout + result.stderr


@pytest.fixture(scope="module")
def one_rank(runs: Path, env, llama: Path) -> Path:
    output, _ = train(runs, env, llama, "one", "--config", "zero2", "--per_device_train_batch_size", "8",
                      "--save_strategy", "no")  # fmt: skip
    return output


def sequence_parallel(runs: Path, env, llama: Path, zero: str, *flags: str):
    return train(runs, env, llama, f"sp2-{zero}", "--config", zero, "--nproc-per-node", "2", "--sp-size", "2",
                 "--per_device_train_batch_size", "8", *flags)  # fmt: skip


def losses_agree(got: list[float], want: list[float]) -> None:
    assert len(got) == len(want) == STEPS
    worst = max(abs(g - w) / w for g, w in zip(got, want, strict=True))
    assert worst < RTOL, (worst, got, want)


def test_sp2_under_zero2_logs_one_ranks_losses_and_resumes_without_sequence_parallel(runs, env, llama, one_rank):
    output, said = sequence_parallel(runs, env, llama, "zero2", "--save_strategy", "steps", "--save_steps", "5")
    losses_agree(logged_losses(output), logged_losses(one_rank))
    assert "2 ranks = sequence parallel 2 x data parallel 1; global batch 8 = 8 per group" in said
    assert "the evaluation takes 48 of the 50 validation blocks, whole batches of 8" in said
    assert json.loads((output / "zerokit-run.json").read_text())["parallelism"] == {"sp_size": 2, "dp_size": 1}

    # Its checkpoint at step 5, resumed by 2 data-parallel ranks of 4 each: the same global batch, the same curve.
    resumed, said = train(runs, env, llama, "resumed", "--config", "zero2", "--nproc-per-node", "2",
                            "--per_device_train_batch_size", "4", "--resume", str(output / "checkpoint-5"))  # fmt: skip
    assert "2 ranks = tensor parallel 1 x data parallel 2" in said
    assert f"zerokit: resuming from {output / 'checkpoint-5'}" in said
    losses_agree(logged_losses(resumed), logged_losses(one_rank))  # steps 1-5 the checkpoint's, 6-10 its own


def test_sp2_under_zero3_logs_one_ranks_losses_and_saves_a_whole_model(runs, env, llama, one_rank):
    from transformers import AutoModelForCausalLM

    output, _ = sequence_parallel(runs, env, llama, "zero3", "--per_device_eval_batch_size", "5")
    losses_agree(logged_losses(output), logged_losses(one_rank))
    # 50 validation blocks in whole batches of 5: all of them, the eval loss of one rank's (ZeRO-2's) model.
    evaluated = json.loads((output / "eval_results.json").read_text())["eval_loss"]
    assert evaluated == pytest.approx(json.loads((one_rank / "eval_results.json").read_text())["eval_loss"], rel=RTOL)
    model = AutoModelForCausalLM.from_pretrained(output)  # gathered from the ranks' partitions: a plain HF folder
    assert model.num_parameters() == AutoModelForCausalLM.from_pretrained(one_rank).num_parameters()
