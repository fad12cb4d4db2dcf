"""train's limits that the model's config is enough to refuse, before its weights load: blocks past the
model's positions, a tokenizer larger than its embedding. A config folder without weights stands for the model."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from zerokit.foundations.errors import UserError
from zerokit.sources.embedded import GPT2_SIZE, prepare_embedded
from zerokit.train.data.datasets import prepared_info
from zerokit.train.model.loading import check_limits, model_config
from zerokit.train.options import TrainFlags


@pytest.fixture(scope="module")
def tokenizer(tmp_path_factory):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(prepare_embedded(tmp_path_factory.mktemp("embedded"))[1])


def config_folder(folder: Path, **config) -> str:
    """A model folder holding only its config (no weights: the checks must not need them)."""
    from transformers import GPT2Config

    GPT2Config(**GPT2_SIZE | config).save_pretrained(folder)
    return str(folder)


def refusal(options: TrainFlags, tokenizer) -> str:
    with pytest.raises(UserError) as refused:
        check_limits(options, tokenizer, model_config(options, tokenizer), prepared_info(options))
    return str(refused.value)


def test_a_block_size_past_the_models_positions(tmp_path: Path, tokenizer):
    model = config_folder(tmp_path, vocab_size=len(tokenizer))
    assert refusal(TrainFlags(model=model, block_size=128), tokenizer) == (
        "--block-size 128 is past the model's 64 positions (max_position_embeddings in its config): "
        "give --block-size 64 or less"
    )
    options = TrainFlags(model=model, block_size=64)
    check_limits(options, tokenizer, model_config(options, tokenizer), None)


def test_prepared_blocks_past_the_models_positions(tmp_path: Path, tokenizer):
    model = config_folder(tmp_path / "model", vocab_size=len(tokenizer))
    blocks = tmp_path / "blocks"
    blocks.mkdir()
    (blocks / "zerokit-prepared.json").write_text(json.dumps({"block_size": 128, "vocab_size": len(tokenizer)}))
    assert refusal(TrainFlags(model=model, dataset=str(blocks)), tokenizer) == (
        f"the 128-token blocks of --dataset {blocks} are past the model's 64 positions (max_position_embeddings in "
        "its config): run `prepare tokenize` again with --block-size 64"
    )


def test_a_tokenizer_larger_than_the_pretrained_models_embedding(tmp_path: Path, tokenizer):
    model = config_folder(tmp_path, vocab_size=100)
    assert refusal(TrainFlags(model=model, tokenizer="tok"), tokenizer) == (
        f"the tokenizer has {len(tokenizer)} tokens, more than the 100 the model embeds (vocab_size): use the "
        "model's own tokenizer (drop --tokenizer), or --from-scratch to fit a new embedding to it"
    )
    scratch = TrainFlags(model=model, from_scratch=True)  # its config is fitted to the tokenizer
    check_limits(scratch, tokenizer, model_config(scratch, tokenizer), None)


def test_a_fresh_config_made_smaller_than_its_tokenizer(tokenizer):
    options = TrainFlags(model_type="gpt2", config_overrides="vocab_size=100")
    assert refusal(options, tokenizer) == (
        f"the tokenizer has {len(tokenizer)} tokens, more than the 100 the model embeds (vocab_size): "
        "drop vocab_size from --config-overrides"
    )


def test_drop_last_with_a_split_smaller_than_one_batch_is_refused_before_training():
    """HF's --dataloader_drop_last drops each split's short last batch: a validation split of fewer blocks than one
    batch over the data-parallel ranks would have none, and the final evaluation ended the run with a KeyError."""
    from types import SimpleNamespace

    from zerokit.train.data.datasets import check_full_batches

    blocks = {"train": list(range(64)), "validation": list(range(10))}
    args = SimpleNamespace(dataloader_drop_last=True, per_device_train_batch_size=8, per_device_eval_batch_size=8)
    check_full_batches(blocks, args, data_parallel=1, micro_batch_chosen=False)  # 10 blocks: one batch of 8
    with pytest.raises(UserError) as refused:
        check_full_batches(blocks, args, data_parallel=2, micro_batch_chosen=False)
    assert refused.value.every_rank  # every rank finds it alike: rank 0 says it
    assert str(refused.value) == (
        "--dataloader_drop_last drops every batch short of 8 blocks on each of 2 ranks, and the validation split has "
        "10: it would have none: lower --per_device_eval_batch_size or drop --dataloader_drop_last"
    )
    check_full_batches(blocks, SimpleNamespace(**{**vars(args), "dataloader_drop_last": False}), 2, False)
    few = {"train": list(range(6)), "validation": list(range(64))}  # --micro-batch auto picks at most 6
    check_full_batches(few, args, data_parallel=1, micro_batch_chosen=True)
