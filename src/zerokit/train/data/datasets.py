"""The training and validation blocks of a run: memory-mapped when `prepare tokenize` made them, else
tokenized here (rank 0 first, the others read its cache)."""

from __future__ import annotations

from pathlib import Path

from zerokit.foundations.errors import UserError
from zerokit.train.model.loading import embedded_cache_dir, pick_block_size
from zerokit.train.options import TrainFlags


def prepared_info(options: TrainFlags) -> dict | None:
    """What `prepare tokenize` recorded of --dataset (its tokenizer, its block size), or None: read once, before
    the model, so that its blocks are checked against the model's limits too."""
    from zerokit.sources.data import read_prepared

    return read_prepared(Path(options.dataset).expanduser()) if options.dataset else None


def load_datasets(options: TrainFlags, tokenizer, model, args, prepared: dict | None):
    """train/validation blocks: memory-mapped when `prepare tokenize` made them (prepared: its prepared_info),
    else tokenized here."""
    if prepared is not None:
        return load_prepared(options, tokenizer, model, args.process_index, prepared)
    block_size = pick_block_size(options, tokenizer, model)
    with args.main_process_first(desc="dataset"):
        blocks = tokenize_datasets(options, tokenizer, block_size, args.seed)
    if not options.streaming:
        from zerokit.sources.data import check_blocks

        check_blocks(blocks, options.dataset or "embedded", block_size)
    return blocks


class NoFullBatch(UserError):
    """Every rank finds the same split sizes after they met: rank 0 says it."""

    every_rank = True


def check_full_batches(blocks, args, data_parallel: int, micro_batch_chosen: bool) -> None:
    """With --dataloader_drop_last, HF drops each split's short last batch: a split smaller than one batch over the
    data-parallel ranks would have no batch at all (its evaluation ended the run with a KeyError, after training).
    The training split is not checked where --micro-batch auto chooses (it never picks more than a rank's share)."""
    if not args.dataloader_drop_last:
        return
    batches = {"validation": "--per_device_eval_batch_size"}
    if not micro_batch_chosen:
        batches["train"] = "--per_device_train_batch_size"
    for split, flag in batches.items():
        per_rank = getattr(args, flag[2:])
        if split in blocks and hasattr(blocks[split], "__len__") and len(blocks[split]) < per_rank * data_parallel:
            raise NoFullBatch(
                f"--dataloader_drop_last drops every batch short of {per_rank} blocks on each of {data_parallel} "
                f"ranks, and the {split} split has {len(blocks[split])}: it would have none: lower {flag} or drop "
                "--dataloader_drop_last"
            )


def load_prepared(options: TrainFlags, tokenizer, model, rank: int, info: dict):
    import datasets

    if info["vocab_size"] != len(tokenizer):
        raise UserError(
            f"dataset {options.dataset} was tokenized with {info['tokenizer']} ({info['vocab_size']} tokens), "
            f"not this run's tokenizer ({len(tokenizer)} tokens): run `prepare tokenize` again with --tokenizer"
        )
    if options.block_size and options.block_size != info["block_size"]:
        raise UserError(
            f"--block-size {options.block_size}, but {options.dataset} holds blocks of {info['block_size']}: "
            "drop --block-size, or run `prepare tokenize` again"
        )
    pick_block_size(options, tokenizer, model, info["block_size"])  # within the model's maximum
    blocks = datasets.load_from_disk(options.dataset)  # memory-mapped Arrow files: nothing is tokenized
    print(
        f"zerokit: rank {rank}: dataset {options.dataset} is pre-tokenized ({len(blocks['train'])} blocks of "
        f"{info['block_size']} tokens): memory-mapped, no tokenization",
        flush=True,
    )
    return blocks


def tokenize_datasets(options: TrainFlags, tokenizer, block_size: int, seed: int):
    from zerokit.sources.data import DatasetSource, load_raw, resolve_source, stream_blocks, tokenize_and_group

    if options.streaming:
        print(f"zerokit: streaming {options.dataset}: tokenized while training, nothing written", flush=True)
        return stream_blocks(resolve_source(options.dataset), tokenizer, options.text_column, block_size)
    if options.dataset:
        raw = load_raw(resolve_source(options.dataset), options.validation_split_percentage, seed)
    else:
        from zerokit.sources.embedded import prepare_embedded

        files, _ = prepare_embedded(embedded_cache_dir())
        raw = load_raw(
            DatasetSource(kind="files", location="embedded"), 0, seed, splits={k: str(v) for k, v in files.items()}
        )
    return tokenize_and_group(raw, tokenizer, options.text_column, block_size)


def block_length(blocks) -> int:
    """Tokens in each training block (every block has the same length)."""
    return len(next(iter(blocks))["input_ids"])
