"""`--sp-size N`: sequence parallelism, DeepSpeed Ulysses (Arctic Long Sequence Training) through the HF Trainer.

The Trainer takes it as `TrainingArguments.parallelism_config` (accelerate's `ParallelismConfig(sp_backend=
"deepspeed")`, not a command-line flag): accelerate registers DeepSpeed's `UlyssesSPAttentionHF` as the model's
attention and wraps the dataloaders in `UlyssesSPDataLoaderAdapter`, which hands each of a group's N ranks 1/N of
every block's tokens (and their shifted labels); attention exchanges heads for tokens with an all-to-all, so each
rank holds 1/N of the activations. The N ranks of a group share one batch: data parallel is world / N, and the
Trainer weights the loss by each rank's real tokens, so a group logs the losses of one rank given the whole block.

What zerokit adds, in one line before the work: the layouts and options Ulysses cannot take (`check_options`,
before torch), the model's heads (`check_model`) and, on CPU ranks, the group sizes torch's gloo all-to-all
serves (`check_ranks`), on every rank before the model is built; and the batches it needs (`collate`): the
positions of every token, a block padded to a multiple of N.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from zerokit.foundations.errors import UserError
from zerokit.train.parallel.layout import refuse_unserved
from zerokit.train.parallel.tensor_parallel import LayoutRefused

# The attention kernels UlyssesSPAttentionHF wraps (accelerate's DeepSpeedSequenceParallelConfig); sdpa is the default.
ATTENTION_KINDS = ("sdpa", "flash_attention_2", "flash_attention_3")
# zerokit options a sequence-parallel run does not serve yet: flag -> whether it is given.
UNSERVED: dict[str, Callable[[Any], bool]] = {
    "--tp-size": lambda o: o.tp_size > 1,
    "--pp-size": lambda o: o.pp_size is not None,
    "--lora": lambda o: o.lora is not None,
    "--train-last-layers": lambda o: bool(o.train_last_layers),
    "--streaming": lambda o: o.streaming,
    "--micro-batch auto": lambda o: bool(o.micro_batch),
    "--cross-entropy chunked or liger": lambda o: o.cross_entropy != "hf",
    "--compile": lambda o: o.compile != "off",
}


def check_options(options) -> None:
    """--sp-size against the other options (TrainFlags; before torch)."""
    sp = options.sp_size
    if sp == 1:
        return
    refuse_unserved("--sp-size", sp, UNSERVED, options, "sequence-parallel runs")
    if options.ds_settings is None:
        raise UserError(f"--sp-size {sp} needs DeepSpeed (Ulysses is its sequence parallelism): drop --config none")
    attention = options.attn_implementation
    if attention is not None and attention not in ATTENTION_KINDS:
        raise UserError(
            f"--sp-size {sp} with --attn-implementation {attention}: Ulysses wraps {', '.join(ATTENTION_KINDS)} "
            "only; drop --attn-implementation (sdpa) or pick one of them"
        )


def check_model(sp_size: int, config) -> None:
    """Whether a group's sp_size ranks can each take an equal share of the model's attention heads."""
    if sp_size == 1:
        return
    text = config.get_text_config()
    heads = getattr(text, "num_attention_heads", None)
    sizes = {
        "attention heads (num_attention_heads)": heads,
        "key-value heads (num_key_value_heads)": getattr(text, "num_key_value_heads", None) or heads,
    }
    for what, size in sizes.items():
        if size is not None and size % sp_size:
            raise LayoutRefused(
                f"--sp-size {sp_size} does not divide the model's {size} {what}: Ulysses gives each rank of a group "
                "an equal share of them; pick a --sp-size that divides it"
            )


def check_ranks(sp_size: int, world: int, on_gpu: bool) -> None:
    """On CPU ranks, one group of the whole world: torch's gloo all-to-all (torch.distributed.nn.functional's
    _AlltoAll, the one Ulysses' backward takes) scatters from a subgroup's ranks by their number in the group as
    if it were their global one, so every group but the first fails in its first backward."""
    if sp_size == 1 or on_gpu or sp_size == world:
        return
    raise LayoutRefused(
        f"--sp-size {sp_size} on {world} CPU ranks: torch's gloo all-to-all serves one sequence-parallel group of "
        f"every rank only; on CPU ranks give --sp-size {world} (on GPUs, NCCL takes any --sp-size that divides the "
        "world)"
    )


def parallelism_config(sp_size: int, world: int, attention: str | None) -> Any:
    """accelerate's ParallelismConfig for sp_size-rank Ulysses groups, world / sp_size of them data-parallel."""
    from accelerate.parallelism_config import ParallelismConfig
    from accelerate.utils import DeepSpeedSequenceParallelConfig

    handler = DeepSpeedSequenceParallelConfig(
        sp_seq_length_is_variable=True, sp_attn_implementation=attention or ATTENTION_KINDS[0]
    )
    return ParallelismConfig(
        sp_backend="deepspeed", sp_size=sp_size, dp_shard_size=world // sp_size, sp_handler=handler
    )


def collate(sp_size: int) -> Callable[[list[dict]], dict]:
    """The Trainer's batches for Ulysses: transformers' default collation plus each token's position (the adapter
    shards position_ids with the tokens, so every rank keeps its tokens' global positions), the blocks padded at
    their end to a multiple of sp_size (pad labels -100, which no loss counts; causal attention keeps the real
    tokens from seeing the padding)."""
    import torch
    from transformers import default_data_collator

    def collate_batch(features: list[dict]) -> dict:
        batch = default_data_collator(features)
        rows, length = batch["input_ids"].shape
        pad = -length % sp_size
        if pad:
            batch["input_ids"] = torch.nn.functional.pad(batch["input_ids"], (0, pad), value=0)
            if "labels" in batch:
                batch["labels"] = torch.nn.functional.pad(batch["labels"], (0, pad), value=-100)
            if "attention_mask" in batch:
                batch["attention_mask"] = torch.nn.functional.pad(batch["attention_mask"], (0, pad), value=0)
        batch["position_ids"] = torch.arange(length + pad).expand(rows, -1).clone()
        return batch

    return collate_batch


def whole_eval_batches(validation, batch_size: int, notes: list[str]):
    """The validation blocks cut to whole batches of batch_size (--per_device_eval_batch_size), said in notes.

    Under Ulysses the Trainer averages a short last evaluation batch wrongly (measured: 50 blocks in batches of 8 gave
    an eval loss 2.3e-4 relative off one rank's on the same weights; in batches of 5 or 10, the same to the bit)."""
    blocks = len(validation)
    kept = blocks - blocks % batch_size
    if kept == blocks:
        return validation
    if kept == 0:
        raise UserError(
            f"--sp-size: the {blocks} validation block(s) make no whole evaluation batch of {batch_size}: give "
            f"--per_device_eval_batch_size {blocks} or less, or a larger --validation-split-percentage"
        )
    notes.append(
        f"sequence parallel: the evaluation takes {kept} of the {blocks} validation blocks, whole batches of "
        f"{batch_size} (--per_device_eval_batch_size): Ulysses would average a short last batch wrongly"
    )
    return validation.select(range(kept))
