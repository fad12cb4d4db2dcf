"""--pp-size without ranks: the layer list computes the Hugging Face model's loss, and what cannot run is refused.

The layer list is what the pipeline's stages apply in turn: applied in one process it must give the loss
the model gives itself, and name every weight as the model names it (so the stages save one HF model).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from zerokit.foundations.errors import UserError
from zerokit.outputs.checkpoints import PIPELINE_NAME, check_pipeline_resume
from zerokit.train.cli import parse
from zerokit.train.engines.pipeline_layers import (
    PipeLayer,
    PipelineRefused,
    head_forward,
    loss_function,
    pipeline_layers,
)
from zerokit.train.parallel.layout import ParallelLayout


def tiny(kind: str):
    from transformers import AutoModelForCausalLM, GPT2Config, LlamaConfig, OPTConfig

    llama = dict(
        hidden_size=32, intermediate_size=64, num_hidden_layers=3, num_attention_heads=4, num_key_value_heads=2
    )
    configs = {
        "llama": LlamaConfig(vocab_size=101, **llama),
        "llama-tied": LlamaConfig(vocab_size=101, tie_word_embeddings=True, **llama),
        "gpt2": GPT2Config(
            vocab_size=101, n_embd=32, n_layer=3, n_head=4, n_positions=64, bos_token_id=0, eos_token_id=0
        ),
        "opt": OPTConfig(vocab_size=101, hidden_size=32, ffn_dim=64, num_hidden_layers=2, num_attention_heads=4),
    }
    torch.manual_seed(0)
    return AutoModelForCausalLM.from_config(configs[kind]).eval()  # eval: no dropout


def run_in_one_process(layers: list[PipeLayer], input_ids: torch.Tensor) -> torch.Tensor:
    """The layer list applied in order, as the pipeline's stages together apply it: the logits."""
    hidden = input_ids
    for layer in layers:
        hidden = head_forward(layer.module, hidden) if layer.head else layer.module(hidden)
    return hidden


@pytest.mark.parametrize("kind", ["llama", "llama-tied", "gpt2"])
def test_the_layer_list_gives_the_models_loss_and_names_its_weights(kind: str):
    model = tiny(kind)
    ids = torch.randint(0, 101, (2, 16))
    layers = pipeline_layers(model)
    assert sum(layer.is_block for layer in layers) == 3
    with torch.no_grad():
        want = model(input_ids=ids, labels=ids).loss
        got = loss_function(model)(run_in_one_process(layers, ids), ids)
    assert torch.allclose(got, want, rtol=1e-6), (got, want)
    named = {name for layer in layers for name in layer.hf_state()}
    tied = {"lm_head.weight"} if model.config.tie_word_embeddings else set()
    assert named == set(model.state_dict()) - tied


def test_a_model_of_another_architecture_is_refused_on_every_rank():
    with pytest.raises(PipelineRefused, match=r"cannot cut a opt model .* it can cut the Llama family"):
        pipeline_layers(tiny("opt"))
    assert PipelineRefused.every_rank


@pytest.mark.parametrize(
    "flags, message",
    [
        (["--config", "zero2"], "--pp-size 2 with ZeRO-2 (--config zero2): DeepSpeed's pipeline engine refuses"),
        (["--config", "none"], "--pp-size 2 needs DeepSpeed (its pipeline engine trains the stages): --config zero1"),
        (["--config", "zero1", "--tp-size", "2"], "--pp-size 2 with --tp-size: pipeline runs do not take --tp-size"),
        (["--config", "zero1", "--lora"], "--pp-size 2 with --lora"),
    ],
)
def test_options_the_pipeline_cannot_serve_are_refused_before_torch(flags: list[str], message: str):
    with pytest.raises(UserError) as refused:
        parse(["--pp-size", "2", "--model-type", "llama", *flags], environ={})
    assert message in str(refused.value)


def test_stages_must_divide_the_ranks_and_the_line_says_the_global_batch():
    assert ParallelLayout.check(8, 8, "WORLD_SIZE", pp=None).pp is None  # no --pp-size: the Trainer
    assert ParallelLayout.check(8, 8, "WORLD_SIZE", pp=2) == ParallelLayout(pp=2, dp=4)
    with pytest.raises(UserError, match="--pp-size 4 does not divide the 6 ranks"):
        ParallelLayout.check(6, 6, "--nproc-per-node", pp=4)
    line = ParallelLayout(pp=4, dp=2).describe(micro_batch=4, accumulation=2)
    assert "8 ranks = pipeline 4 stages x data parallel 2; global batch 16 = 4 per micro-batch" in line
    assert "--gradient_accumulation_steps 8 or more fills the pipeline" in line


def test_a_checkpoint_resumes_only_in_the_layout_that_wrote_it(tmp_path: Path):
    trainer, staged = tmp_path / "trainer", tmp_path / "staged"
    trainer.mkdir()
    staged.mkdir()
    (staged / PIPELINE_NAME).write_text(json.dumps({"pp_size": 2, "dp_size": 1}))
    check_pipeline_resume(trainer, None)
    check_pipeline_resume(staged, {"pp_size": 2, "dp_size": 1})
    with pytest.raises(UserError, match="written with --pp-size 2 on 2 ranks, this run has --pp-size 2 on 4 ranks"):
        check_pipeline_resume(staged, {"pp_size": 2, "dp_size": 2})
    with pytest.raises(UserError, match="written with --pp-size 2 on 2 ranks, this run has no --pp-size"):
        check_pipeline_resume(staged, None)
    with pytest.raises(UserError, match=f"written without --pp-size.*`train --model {trainer} ...` without --resume"):
        check_pipeline_resume(trainer, {"pp_size": 2, "dp_size": 1})


def test_replicas_read_disjoint_shares_and_a_resume_reads_on_where_the_run_stopped():
    import datasets

    from zerokit.train.engines.pipeline_engine import micro_batches

    blocks = datasets.Dataset.from_dict(
        {"input_ids": [[i, i] for i in range(20)], "labels": [[i, i] for i in range(20)]}
    )

    def firsts(replica: int, start: int, count: int) -> list[int]:
        stream = micro_batches(blocks, 2, 2, replica, seed=3, start=start)
        return [int(row[0]) for _ in range(count) for row in next(stream)[0]]

    epoch = [firsts(replica, 0, 5) for replica in (0, 1)]  # 20 blocks / 2 replicas / micro-batches of 2
    assert sorted(epoch[0] + epoch[1]) == list(range(20))
    two_epochs = firsts(0, 0, 10)
    assert two_epochs[:10] == epoch[0] and two_epochs[10:] != epoch[0]  # the next epoch is dealt anew
    assert firsts(1, 0, 12) == firsts(1, 0, 6) + firsts(1, 6, 6)
