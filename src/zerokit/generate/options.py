"""`generate`'s flags, each defined once in GenerateFlags (zerokit.foundations.flags), and the checks of
their combinations, all made before anything loads."""

from __future__ import annotations

import argparse
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from zerokit.foundations import values
from zerokit.foundations.errors import UserError
from zerokit.foundations.flags import command_parser, flag, from_namespace
from zerokit.foundations.values import count

DEVICE_MAPS = ("auto", "balanced", "sequential")
DTYPES = ("auto", "bf16", "fp16", "fp32")
TRUNCATE = ("left", "error")
_MEMORY = re.compile(r"\s*(cpu|disk|mps|\d+)\s*=\s*(\d+(?:\.\d+)?\s*[KMGT]?i?B)\s*", re.IGNORECASE)


def max_memory(name: str, text: str) -> dict[int | str, str]:
    """`0=20GiB,1=20GiB,cpu=64GiB` as from_pretrained's max_memory: GPU indices as ints, sizes as accelerate
    reads them."""
    budget: dict[int | str, str] = {}
    for part in filter(None, (p.strip() for p in text.split(","))):
        match = _MEMORY.fullmatch(part)
        if match is None:
            raise UserError(f"{name}={text!r}: give DEVICE=SIZE pairs, e.g. 0=20GiB,1=20GiB,cpu=64GiB (not {part!r})")
        device, size = match.groups()
        budget[int(device) if device.isdigit() else device.lower()] = size.replace(" ", "")
    if not budget:
        raise UserError(f"{name}={text!r}: give DEVICE=SIZE pairs, e.g. 0=20GiB,1=20GiB,cpu=64GiB")
    return budget


@dataclass(frozen=True)
class GenerateFlags:
    """`generate`'s flags, each defined once here (zerokit.foundations.flags)."""

    model: str = flag("model", help="a folder written by train (a model, or a LoRA adapter), or a Hub id")
    base: str | None = flag(
        "--base", help="base model of a LoRA adapter folder (default: the one recorded in adapter_config.json)"
    )
    # where the prompts come from
    prompt: list[str] = flag("--prompt", action="append", default=[], help="a prompt; repeat for several")
    prompts_file: Path | None = flag("--prompts-file", type=Path, help="one prompt per line")
    jsonl: Path | None = flag(
        "--jsonl", type=Path, help="prompts from jsonl rows: the `prompt` field, or --template filled from each row"
    )
    dataset: Path | None = flag(
        "--dataset",
        type=Path,
        help="prompts from a dataset's rows: a .jsonl/.json/.csv file or a save_to_disk folder (see --split)",
    )
    split: str = flag("--split", default="train", help="with --dataset: the split of a save_to_disk DatasetDict")
    template: str | None = flag(
        "--template", help='with --jsonl/--dataset: each row\'s fields, e.g. "Question: {question}\\nAnswer:"'
    )
    sample: int | None = flag("--sample", check=count, help="a random sample of N rows (drawn with --seed)")
    chat: bool = flag(
        "--chat",
        default=False,
        action="store_true",
        help="each prompt as the user message of the tokenizer's chat template",
    )
    # how to generate
    max_new_tokens: int = flag(
        "--max-new-tokens", type=int, default=24, help="a row's own `max_new_tokens` field wins over it"
    )
    truncate: str = flag(
        "--truncate",
        choices=TRUNCATE,
        default="left",
        help="a row whose prompt and new tokens pass the model's context: cut its prompt's oldest tokens and cap "
        "its new tokens, with one warning per run (left), or refuse the run before the model loads (error)",
    )
    temperature: float = flag("--temperature", check=values.temperature, default=0.0, help="0 means greedy")
    top_p: float = flag("--top-p", check=values.top_p, default=1.0, help="sample from this share of the mass")
    seed: int = flag("--seed", type=int, default=0, help=None)
    stop: list[str] = flag(
        "--stop", action="append", default=[], help="cut the completion at the first of these strings; repeatable"
    )
    batch_size: int = flag("--batch-size", type=int, default=8, help="prompts per generate call (per rank)")
    # where the model goes
    dtype: str | None = flag("--dtype", choices=DTYPES, help="weights' dtype (default: transformers')")
    device_map: str | None = flag(
        "--device-map", choices=DEVICE_MAPS, help="spread one model over this node's GPUs, CPU and disk (accelerate)"
    )
    max_memory: dict | None = flag(
        "--max-memory", check=max_memory, help="with --device-map: e.g. 0=20GiB,1=20GiB,cpu=64GiB"
    )
    offload_folder: Path | None = flag(
        "--offload-folder", type=Path, help="with --device-map: where weights that fit nowhere else go"
    )
    tp_size: int = flag(
        "--tp-size",
        check=count,
        default=1,
        help="ranks that share one model (DeepSpeed AutoTP); the rest is data parallel",
    )
    # where the rows go
    output: Path | None = flag("--output", type=Path, help="write jsonl here (default: print to stdout)")
    overwrite: bool = flag("--overwrite", default=False, action="store_true", help="replace an existing --output file")
    resume: bool = flag(
        "--resume", default=False, action="store_true", help="keep the rows an earlier run of --output finished"
    )
    report: Path | None = flag("--report", type=Path, help="write throughput, first-token time and peak memory (JSON)")


def build_parser(environ: Mapping[str, str] = os.environ) -> argparse.ArgumentParser:
    from zerokit import generate

    return command_parser(GenerateFlags, environ, prog="generate", description=generate.__doc__)


def parse(argv: list[str]) -> GenerateFlags:
    """The options, their combinations checked (each refusal one line)."""
    options = from_namespace(GenerateFlags, build_parser().parse_args(argv))
    if options.batch_size < 1:
        raise UserError(f"--batch-size must be at least 1, got {options.batch_size}")
    if options.max_new_tokens < 1:
        raise UserError(f"--max-new-tokens must be at least 1, got {options.max_new_tokens}")
    if options.resume and options.overwrite:
        raise UserError("--resume keeps the rows done, --overwrite replaces them: pass one")
    if options.resume and not options.output:
        raise UserError("--resume continues an --output file: pass --output FILE")
    if (options.max_memory or options.offload_folder) and not options.device_map:
        raise UserError("--max-memory and --offload-folder place a model with --device-map: pass --device-map auto")
    if options.device_map and options.tp_size > 1:
        raise UserError("--device-map spreads one model in one process, --tp-size over ranks: pass one")
    return options
