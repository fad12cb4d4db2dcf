"""--tp-size's layout checks (zerokit.train.parallel.layout, zerokit.train.parallel.tensor_parallel): rank counts, and
models AutoTP can split evenly."""

from __future__ import annotations

import pytest

from zerokit.foundations.errors import UserError
from zerokit.train.parallel.layout import ParallelLayout
from zerokit.train.parallel.tensor_parallel import LayoutRefused, check_model


def test_ranks_divide_into_tensor_parallel_groups_within_a_node():
    # 4 nodes of 4: TP in a node, DP across
    assert ParallelLayout.check(16, 4, "--nproc-per-node", tp=4) == ParallelLayout(tp=4, dp=4)
    assert ParallelLayout.check(3, 3, "--nproc-per-node", tp=1) == ParallelLayout(tp=1, dp=3)
    with pytest.raises(UserError, match="does not divide the 6 ranks per node"):
        ParallelLayout.check(12, 6, "WORLD_SIZE, LOCAL_WORLD_SIZE", tp=4)  # a group would span two nodes


def test_the_start_up_line_says_the_layout_and_the_global_batch():
    line = ParallelLayout(tp=2, dp=3).describe(micro_batch=8, accumulation=2)
    assert line.startswith("zerokit: 6 ranks = tensor parallel 2 x data parallel 3; global batch 48 = 8 per rank")
    assert line.endswith("x 2 accumulation (the 2 ranks of a group share a batch)")
    plain = ParallelLayout(dp=2).describe(micro_batch=4, accumulation=1)  # no group of one rank sharing anything
    assert plain.endswith("global batch 8 = 4 per rank x 2 data-parallel x 1 accumulation")


def test_a_model_must_split_evenly():
    from transformers import GPT2Config, LlamaConfig

    check_model(2, LlamaConfig(hidden_size=64, num_attention_heads=4, num_key_value_heads=2))
    check_model(1, GPT2Config())  # no tensor parallelism: any model
    assert LayoutRefused.every_rank  # raised alike in every rank once they met: rank 0 says it
    with pytest.raises(LayoutRefused, match="does not divide the model's 2 key-value heads"):
        check_model(4, LlamaConfig(hidden_size=64, num_attention_heads=4, num_key_value_heads=2))
    with pytest.raises(LayoutRefused, match="does not divide the model's 6 attention heads"):
        check_model(4, LlamaConfig(hidden_size=96, num_attention_heads=6, num_key_value_heads=6))
    with pytest.raises(UserError, match="AutoTP cannot split gpt2 models; train"):
        check_model(2, GPT2Config())
