"""`prepare`: get models and data ready for compute nodes.

    prepare --model NAME [--revision R] [--dataset NAME]   stage: download into HF_HOME (needs network)
    prepare --tokenizer NAME --metric accuracy             what users' scripts also fetch from the Hub
    prepare tokenize SOURCE --tokenizer T --output DIR      tokenize once into fixed-length blocks

Staging writes a manifest (names, revisions, sha256 of each file) next to the cache; nodes then
train with HF_HUB_OFFLINE=1 (train's default). `tokenize` writes Arrow files that `train
--dataset DIR` memory-maps on every rank.
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from zerokit.foundations.errors import UserError
from zerokit.foundations.flags import command_parser, flag, from_namespace
from zerokit.foundations.pool_signals import parent_answers_stops


@dataclass(frozen=True)
class StageFlags:
    """`prepare`'s flags (staging), each defined once here (zerokit.foundations.flags)."""

    model: str | None = flag("--model", help="Hub model id: weights, config and tokenizer files")
    revision: str | None = flag(
        "--revision", help="model branch, tag or commit (default: main); the manifest records the commit"
    )
    dataset: str | None = flag("--dataset", help="Hub dataset name, downloaded and prepared as Arrow files")
    dataset_config: str | None = flag("--dataset-config", help="dataset configuration name")
    dataset_revision: str | None = flag("--dataset-revision", help="dataset branch, tag or commit")
    tokenizer: list[str] = flag(
        "--tokenizer", action="append", default=[], help="Hub repo whose tokenizer files alone to stage (repeatable)"
    )
    metric: list[str] = flag(
        "--metric",
        action="append",
        default=[],
        help="an `evaluate` module to stage (evaluate.load(NAME), e.g. accuracy; repeatable)",
    )
    hf_home: Path | None = flag(
        "--hf-home", type=Path, help="stage into this HF_HOME (default: $HF_HOME); the nodes must use the same"
    )


@dataclass(frozen=True)
class TokenizeFlags:
    """`prepare tokenize`'s flags, each defined once here (zerokit.foundations.flags)."""

    source: str = flag(
        "source", help="a .txt/.jsonl/.csv file, a folder of such files (one kind), a save_to_disk folder or a Hub name"
    )
    tokenizer: str = flag("--tokenizer", required=True, help="tokenizer Hub id or folder (the one train will use)")
    output: Path = flag("--output", type=Path, required=True, help="folder to write (save_to_disk)")
    block_size: int | None = flag(
        "--block-size", type=int, help="tokens per block (default: the tokenizer's maximum, at most 1024)"
    )
    text_column: str = flag("--text-column", default="text", help="column holding the text in jsonl/csv/Arrow data")
    template: str | None = flag(
        "--template", help='build each text from columns, e.g. "Title: {title}\\nAnswer: {answer}"'
    )
    num_proc: int = flag("--num-proc", type=int, default=min(8, os.cpu_count() or 1), help="tokenizing processes")
    validation_split_percentage: int = flag(
        "--validation-split-percentage", type=int, default=5, help="eval split taken from train when none exists"
    )
    seed: int = flag("--seed", type=int, default=42, help="seed of that split (train uses the same default)")
    overwrite: bool = flag(
        "--overwrite", default=False, action="store_true", help="replace an output folder that prepare wrote before"
    )


def stage_parser(environ: Mapping[str, str] = os.environ) -> argparse.ArgumentParser:
    return command_parser(
        StageFlags, environ, prog="prepare", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )


def tokenize_parser(environ: Mapping[str, str] = os.environ) -> argparse.ArgumentParser:
    return command_parser(
        TokenizeFlags, environ, prog="prepare tokenize", description="Tokenize once into fixed-length blocks."
    )


def main(argv: list[str]) -> int:
    if argv[:1] == ["tokenize"]:
        return tokenize_main(argv[1:])
    args = from_namespace(StageFlags, stage_parser().parse_args(argv))
    if not (args.model or args.dataset or args.tokenizer or args.metric):
        raise UserError(
            "nothing to stage: pass --model, --dataset, --tokenizer or --metric NAME (or `prepare tokenize ...`)"
        )
    if args.hf_home:
        os.environ["HF_HOME"] = str(args.hf_home.resolve())  # before huggingface_hub reads it
    from zerokit.prepare.stage import stage

    manifest = stage(
        args.model,
        args.dataset,
        args.revision,
        args.dataset_config,
        args.dataset_revision,
        tokenizers=tuple(args.tokenizer),
        metrics=tuple(args.metric),
    )
    print(f"prepare: manifest {manifest}")
    return 0


def tokenize_main(argv: list[str]) -> int:
    args = from_namespace(TokenizeFlags, tokenize_parser().parse_args(argv))
    if args.block_size is not None and args.block_size < 1:
        raise UserError(f"--block-size must be positive, got {args.block_size}")
    if args.num_proc < 1:
        raise UserError(f"--num-proc must be at least 1, got {args.num_proc}")
    from zerokit.prepare.pack import check_output, tokenize_to_disk
    from zerokit.sources.data import check_text_files, resolve_source
    from zerokit.sources.model_source import is_path, require_tokenizer_folder

    if is_path(args.tokenizer):
        require_tokenizer_folder("--tokenizer", args.tokenizer)
    check_text_files(resolve_source(args.source))  # a missing, empty or binary file, as train refuses it
    check_output(args.output, args.overwrite)  # before any process starts

    with parent_answers_stops():  # Ctrl-C or SIGTERM: one line from this process, its pool's workers silent
        info = tokenize_to_disk(
            args.source,
            args.tokenizer,
            args.output,
            block_size=args.block_size,
            text_column=args.text_column,
            template=args.template,
            num_proc=args.num_proc if args.num_proc > 1 else None,
            validation_split_percentage=args.validation_split_percentage,
            seed=args.seed,
            overwrite=args.overwrite,
        )
    counts = ", ".join(f"{split} {n}" for split, n in info["blocks"].items())
    print(f"prepare: {args.output}: blocks of {info['block_size']} tokens ({counts})")
    return 0
