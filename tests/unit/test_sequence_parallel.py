"""`--sp-size`'s refusals, layout and batches (zerokit.train.parallel.sequence_parallel); the training itself on
gloo ranks against one rank: tests/e2e/test_sequence_parallel.py."""

from __future__ import annotations

import pytest

from zerokit.foundations.errors import UserError
from zerokit.train.cli import parse
from zerokit.train.parallel import sequence_parallel
from zerokit.train.parallel.layout import ParallelLayout


@pytest.mark.parametrize(
    "flags, message",
    [
        (["--config", "none"], "--sp-size 2 needs DeepSpeed (Ulysses is its sequence parallelism): drop --config none"),
        (["--pp-size", "2", "--config", "zero1"], "--sp-size 2 with --pp-size: sequence-parallel runs do not take"),
        (["--tp-size", "2"], "--sp-size 2 with --tp-size: sequence-parallel runs do not take --tp-size yet"),
        (["--lora"], "--sp-size 2 with --lora"),
        (["--cross-entropy", "chunked"], "--sp-size 2 with --cross-entropy chunked or liger"),
        (["--attn-implementation", "eager"], "--sp-size 2 with --attn-implementation eager: Ulysses wraps sdpa, "),
    ],
)
def test_options_ulysses_cannot_take_are_refused_before_torch(flags: list[str], message: str):
    with pytest.raises(UserError) as refused:
        parse(["--sp-size", "2", "--model-type", "llama", *flags], environ={})
    assert message in str(refused.value) and "\n" not in str(refused.value)


def test_groups_must_divide_the_ranks_and_the_line_says_who_shares_a_batch():
    assert ParallelLayout.check(4, 4, "--nproc-per-node", sp=2) == ParallelLayout(sp=2, dp=2)
    with pytest.raises(UserError, match="--sp-size 3 does not divide the 4 ranks"):
        ParallelLayout.check(4, 4, "--nproc-per-node", sp=3)
    with pytest.raises(UserError, match="--sp-size 2 needs 2 ranks at least, this run has 1: add --nproc-per-node 2"):
        ParallelLayout.check(1, 1, "WORLD_SIZE", sp=2)
    layout = ParallelLayout.check(8, 4, "WORLD_SIZE", sp=4)
    line = layout.describe(micro_batch=2, accumulation=3)
    assert line.startswith("zerokit: 8 ranks = sequence parallel 4 x data parallel 2; global batch 12 = 2 per group")
    assert "the 4 ranks of a group share a batch, each 1/4 of its tokens" in line
    assert layout.as_record() == {"sp_size": 4, "dp_size": 2} and layout.model_parallel == 4


def test_heads_a_group_cannot_share_evenly_and_cpu_subgroups_are_refused_on_every_rank():
    from transformers import LlamaConfig

    config = LlamaConfig(num_attention_heads=4, num_key_value_heads=2, hidden_size=64)
    sequence_parallel.check_model(2, config)
    with pytest.raises(UserError, match="--sp-size 4 does not divide the model's 2 key-value heads") as refused:
        sequence_parallel.check_model(4, config)
    assert refused.value.every_rank  # every rank finds it after they met; rank 0 says it
    sequence_parallel.check_ranks(2, 2, on_gpu=False)  # one group of the whole world: served on gloo
    sequence_parallel.check_ranks(2, 4, on_gpu=True)  # NCCL: any group size that divides the world
    with pytest.raises(UserError, match="--sp-size 2 on 4 CPU ranks: torch's gloo all-to-all serves one"):
        sequence_parallel.check_ranks(2, 4, on_gpu=False)


def test_batches_carry_every_tokens_position_and_are_padded_to_the_group():
    collate = sequence_parallel.collate(4)
    rows = [{"input_ids": list(range(1, 7)), "labels": list(range(1, 7)), "attention_mask": [1] * 6}] * 2
    batch = collate(rows)
    assert batch["input_ids"].shape == (2, 8) and batch["input_ids"][0].tolist() == [1, 2, 3, 4, 5, 6, 0, 0]
    assert batch["labels"][1].tolist() == [1, 2, 3, 4, 5, 6, -100, -100]  # the padding counts in no loss
    assert batch["position_ids"][1].tolist() == list(range(8))
    assert sequence_parallel.collate(2)(rows)["input_ids"].shape == (2, 6)  # a multiple already: as it was


def test_evaluation_takes_whole_batches_and_says_so():
    import datasets

    validation = datasets.Dataset.from_dict({"input_ids": [[1, 2]] * 50})
    notes: list[str] = []
    assert len(sequence_parallel.whole_eval_batches(validation, 10, notes)) == 50 and notes == []
    assert len(sequence_parallel.whole_eval_batches(validation, 8, notes)) == 48
    assert notes == [
        "sequence parallel: the evaluation takes 48 of the 50 validation blocks, whole batches of 8 "
        "(--per_device_eval_batch_size): Ulysses would average a short last batch wrongly"
    ]
    with pytest.raises(UserError, match="the 50 validation block\\(s\\) make no whole evaluation batch of 64"):
        sequence_parallel.whole_eval_batches(validation, 64, notes)
