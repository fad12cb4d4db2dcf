"""`bench`: flags -> BenchConfig -> runs (with a progress bar) -> report.md, scaling.png, results.json."""

from __future__ import annotations

import argparse
import importlib.util
import os
import subprocess
import sys
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from zerokit.bench.flops import peak_tflops, precision_of
from zerokit.bench.plan import (
    DATA_SCALES,
    SHARED_SWITCHES,
    SKIPPABLE,
    BenchConfig,
    DataInputs,
    PlainInputs,
    common_training_flags,
    config_and_split,
    plan_runs,
    speed_switches,
)
from zerokit.foundations import values
from zerokit.foundations.errors import UserError
from zerokit.foundations.flags import command_parser, flag, flag_value, from_namespace
from zerokit.foundations.values import int_list
from zerokit.launch.config import REMOTE_LAUNCHERS
from zerokit.outputs import ownership

# The plain HF Trainer script and the raw DeepSpeed loop bench compares train with: part of what bench runs,
# so they ship in the package.
PLAIN_SCRIPT = Path(__file__).with_name("plain_hf_trainer.py")
RAW_SCRIPT = Path(__file__).with_name("raw_deepspeed_loop.py")
PRESET_NAMES = ("gpt2-124m", "gpt2-350m", "tiny")  # zerokit.bench.presets.PRESETS (imports no torch here)


@dataclass(frozen=True)
class BenchFlags:
    """`bench`'s flags, each defined once here (zerokit.foundations.flags); `parse` makes the BenchConfig."""

    output: Path = flag("--output", type=Path, default=Path("runs/bench"), help="report folder (default: runs/bench)")
    preset: str | None = flag(
        "--preset",
        choices=PRESET_NAMES,
        help="a whole job: gpt2-124m (GPT-2 small's shape, blocks of 1024, bf16 on a GPU), gpt2-350m, or tiny (the "
        "same job at 2x64, for CPU); its model and corpus are made in --output; flags given with it override it",
    )
    overwrite: bool = flag(
        "--overwrite",
        default=False,
        action="store_true",
        help="replace an earlier report in --output (other files there are kept)",
    )
    ranks: tuple[int, ...] = flag(
        "--ranks", type=int_list, default=(1, 2), help="ranks per node, comma-separated (default: 1,2)"
    )
    nodes: tuple[int, ...] = flag(
        "--nodes", type=int_list, default=(1,), help="node counts, comma-separated; above 1 needs --hostfile"
    )
    hostfile: str | None = flag("--hostfile", help="hosts for multi-node runs, one per line; started over --launcher")
    launcher: str = flag(
        "--launcher", choices=REMOTE_LAUNCHERS, default="pdsh", help="how launch reaches the other nodes"
    )
    config: str = flag(
        "--config", default="zero2", help="DeepSpeed config: a file or a bundled name (default: zero2, train's)"
    )
    configs: str = flag(
        "--configs",
        default="zero2,zero3,zero3-offload,none",
        help="configs compared on one node at the largest --ranks, comma-separated; none: no DeepSpeed; "
        "NAME+tpN: that config with train --tp-size N (a model AutoTP splits: -- --model-type llama); "
        "NAME+ppN: with train --pp-size N (a ZeRO-1 config: zero1+pp2) "
        "(default: zero2,zero3,zero3-offload,none)",
    )
    steps: int = flag("--steps", check=values.count, default=40, help="optimizer steps per run (default: 40)")
    warmup_steps: int = flag(
        "--warmup-steps",
        check=values.none_or_more,
        default=5,
        help="steps after the first left out of throughput (default: 5)",
    )
    eval_steps: int = flag("--eval-steps", check=values.count, default=20, help="evaluate every N steps (default: 20)")
    batch_size: int = flag(
        "--batch-size", check=values.count, default=16, help="samples per rank per step (default: 16)"
    )
    repeats: int = flag(
        "--repeats", check=values.count, default=5, help="rounds of the overhead comparison (default: 5)"
    )
    overhead_switches: str = flag(
        "--overhead-switches",
        default="",
        help=f"speed switches both sides of the overhead comparison run with, comma-separated: "
        f"{', '.join(SHARED_SWITCHES)} (train's --compile torch is HF's --torch_compile; default: none)",
    )
    peak_tflops: float | None = flag(
        "--peak-tflops",
        check=values.tflops,
        help="peak TFLOPS per device for MFU (default: a table of GPUs; none on CPU)",
    )
    jit_python: str | None = flag(
        "--jit-python", help="python of an environment whose DeepSpeed has no prebuilt ops (make bench makes one)"
    )
    skip: list[str] = flag(
        "--skip", action="append", choices=SKIPPABLE, default=[], help="leave out a comparison (repeatable)"
    )
    run_timeout: float | None = flag(
        "--run-timeout",
        check=values.seconds_or_zero,
        help="seconds a run may take before it counts as hung and is stopped, its stacks in its log (default: 600 "
        "to start plus 30 a step; 0: no limit). A run whose ranks have all written their timings gets 120 s to end",
    )
    model: str | None = flag("--model", help="model to train (default: the embedded tiny GPT-2)")
    dataset: str | None = flag("--dataset", help="text file to train on (default: the embedded corpus)")
    block_size: int | None = flag(
        "--block-size", type=int, help="tokens per sample (needed with --model for the overhead comparison)"
    )


def build_parser(environ: Mapping[str, str] = os.environ) -> argparse.ArgumentParser:
    return command_parser(
        BenchFlags,
        environ,
        prog="bench",
        description="Time train over rank and node counts, against JIT-compiled ops and against a plain HF "
        "Trainer script; writes report.md, scaling.png and results.json. Flags after -- go to both scripts "
        "as TrainingArguments (e.g. -- --bf16 true).",
    )


def parse(argv: list[str]) -> BenchConfig:
    from zerokit.sources.ds_config_check import check_ds_config
    from zerokit.sources.ds_configs import read_ds_config, resolve_ds_config, zero_stage

    cut = argv.index("--") if "--" in argv else len(argv)
    own, train_args = argv[:cut], argv[cut + 1 :]
    args = from_namespace(BenchFlags, build_parser().parse_args(own))
    if args.preset:  # the preset's flags first: the user's own, parsed after them, win
        from zerokit.bench.presets import preset_flags

        own = [*preset_flags(args.preset, args.output.resolve()), *own]
        args = from_namespace(BenchFlags, build_parser().parse_args(own))
    ownership.check_writable(args.output, "--output")
    if ownership.entries(args.output) and not args.overwrite:
        raise UserError(f"{args.output} exists: pass --overwrite to replace an earlier report there, or --output DIR")
    if args.steps <= args.warmup_steps + 1:
        raise UserError(f"--steps {args.steps} leaves nothing to time after {args.warmup_steps} warm-up steps")
    hosts: tuple[str, ...] = ()
    if max(args.nodes) > 1:
        if not args.hostfile:
            raise UserError(f"--nodes {max(args.nodes)} needs --hostfile FILE with that many hosts")
        from zerokit.launch.hostfile import read_hostfile

        hosts = read_hostfile(args.hostfile).hosts  # bench's --ranks are the ranks a node runs: slots are not read
        if len(hosts) < max(args.nodes):
            raise UserError(f"--nodes {max(args.nodes)}, but {args.hostfile} lists {len(hosts)} hosts")
    if args.jit_python and not os.access(args.jit_python, os.X_OK):
        raise UserError(f"--jit-python {args.jit_python} is not an executable (make bench makes one)")
    config = resolve_ds_config(args.config)
    if config is None:
        raise UserError("bench times DeepSpeed: give a config (zero1, zero2, zero3, zero3-offload or a file)")
    check_ds_config(config, pipelined=flag_value(train_args, "--pp-size") is not None)
    import torch

    on_gpu = torch.cuda.is_available()
    overhead_switches = checked_overhead_switches(args.overhead_switches, on_gpu)
    if on_gpu and torch.cuda.is_bf16_supported() and not {"--bf16", "--fp16"} & set(train_args):
        train_args += ["--bf16", "true"]  # train's default on such GPUs; said once, so the plain script gets it too
    precision = precision_of(train_args)
    if on_gpu and not args.peak_tflops and peak_tflops(torch.cuda.get_device_name(0), precision) is None:
        raise UserError(
            f"bench: zerokit.bench.flops has no {precision} peak for {torch.cuda.get_device_name(0)!r}, so MFU cannot "
            f"be reported: give --peak-tflops N (the data sheet's dense {precision} TFLOPS per GPU)"
        )
    cfg = BenchConfig(
        output=args.output.resolve(),
        ranks=args.ranks,
        nodes=args.nodes,
        config=config,
        configs=tuple(checked_configs(args.configs, max(args.ranks))),
        steps=args.steps,
        warmup_steps=args.warmup_steps,
        eval_steps=args.eval_steps,
        batch_size=args.batch_size,
        repeats=args.repeats,
        python=sys.executable,
        jit_python=args.jit_python,
        plain_script=PLAIN_SCRIPT,
        raw_script=RAW_SCRIPT,
        hosts=hosts,
        launcher=args.launcher,
        skip=frozenset(args.skip),
        speed=speed_switches(
            on_gpu,
            lambda name: importlib.util.find_spec(name) is not None,
            zero_stage(read_ds_config(config)),
            micro_batch=train_takes_micro_batch_auto(config, train_args),
        )
        if args.preset
        else (),
        overhead_switches=overhead_switches,
        model=args.model,
        dataset=str(Path(args.dataset).resolve()) if args.dataset else None,
        block_size=args.block_size,
        train_args=tuple(train_args),
        run_timeout=args.run_timeout,
        on_gpu=on_gpu,
        peak_tflops=args.peak_tflops,
        precision=precision,
        preset=args.preset,
    )
    check_train_flags(cfg)
    return cfg


def check_train_flags(cfg: BenchConfig) -> None:
    """train's own checks (no torch) of the command line bench's runs give it, built as they build it, before bench
    claims --output: a flag after `--` that train refuses, a --block-size it refuses, a --model or --dataset that is
    not there fail now, in one line, and not in the first run, after an earlier report was replaced. A preset's model
    and corpus are made after the claim: its block size is checked against its model's positions instead. What train
    checks in its ranks (a model's own limits, the Hub's cache) is still found by the first run."""
    from zerokit.bench.plan import zerokit_run
    from zerokit.sources.model_source import is_path, require_model_folder
    from zerokit.train.cli import parse as parse_train

    run = zerokit_run(cfg, "check", "scaling", 1, max(cfg.ranks))
    options, _ = parse_train(list(run.argv[run.argv.index("train") + 1 :]), read_files=cfg.preset is None)
    if cfg.preset:
        from zerokit.bench.presets import check_block_size

        check_block_size(cfg.preset, options.block_size or 0)  # the runs' own: a --block-size after `--` wins
    elif cfg.model and is_path(cfg.model):
        require_model_folder("--model", cfg.model)


def checked_overhead_switches(text: str, on_gpu: bool) -> tuple[str, ...]:
    """--overhead-switches: names of SHARED_SWITCHES, each once; an attention kernel runs on a GPU, its package here
    (bench's runs use this interpreter)."""
    from zerokit.train.model.switches import check_attention

    names = tuple(dict.fromkeys(name.strip() for name in text.split(",") if name.strip()))
    for name in names:
        if name not in SHARED_SWITCHES:
            raise UserError(
                f"--overhead-switches {name}: not a switch both sides have; choose from {', '.join(SHARED_SWITCHES)}"
            )
        train_flags = SHARED_SWITCHES[name][0]
        if train_flags[0] == "--attn-implementation":
            if not on_gpu:
                raise UserError(f"--overhead-switches {name}: FlashAttention runs on GPUs only; leave it out here")
            check_attention(train_flags[1])
    return names


def checked_configs(text: str, ranks: int) -> list[str]:
    """The configs group's entries, each checked now (in one line, not after the other runs): a config, and
    with `+tpN` or `+ppN` a tensor-parallel or pipeline size that divides the group's ranks (the largest
    --ranks); a pipeline's config must be ZeRO-1."""
    import json

    from zerokit.sources.ds_config_check import check_ds_config
    from zerokit.sources.ds_configs import resolve_ds_config, zero_stage

    names = [name.strip() for name in text.split(",") if name.strip()]
    for entry in names:
        name, split, size = config_and_split(entry)
        config = resolve_ds_config(name)
        if config:
            check_ds_config(config, pipelined=split == "pp")
        what = {"tp": "tensor parallel", "pp": "pipeline", "": ""}[split]
        if size < 1:
            raise UserError(f"--configs {entry}: the {what} size must be at least 1 (+{split}2, +{split}4, ...)")
        if ranks % size:
            raise UserError(
                f"--configs {entry}: {what} size {size} does not divide the {ranks} ranks the configs "
                f"run on (the largest --ranks): give --ranks a multiple of {size}"
            )
        stage = zero_stage(json.loads(config.read_text())) if config else None
        if split == "pp" and stage != 1:
            raise UserError(f"--configs {entry}: pipeline stages train with ZeRO-1: give zero1+pp{size}")
    return names


def plain_inputs(cfg: BenchConfig) -> PlainInputs | None:
    """The files the plain script needs for the same job; None when it cannot run that job."""
    if cfg.plain_script is None or "overhead" in cfg.skip:
        return None
    if cfg.model or cfg.dataset:
        if not (cfg.model and cfg.dataset and cfg.dataset.endswith(".txt") and cfg.block_size):
            print("bench: overhead comparison left out: it needs --model, a .txt --dataset and --block-size")
            return None
        flags = ("--model_name_or_path", cfg.model, "--tokenizer_name", cfg.model)
        return PlainInputs(flags, cfg.dataset, cfg.dataset, cfg.block_size)
    from transformers import AutoTokenizer

    from zerokit.sources.embedded import BLOCK_SIZE, model_config, prepare_embedded
    from zerokit.train.model.loading import fit_to_tokenizer
    from zerokit.train.options import EMBEDDED_TRAINING_DEFAULTS

    files, tokenizer_dir = prepare_embedded(cfg.output / "cache" / "embedded")  # where the train runs find it
    config = fit_to_tokenizer(model_config(), AutoTokenizer.from_pretrained(tokenizer_dir))
    config.save_pretrained(cfg.output / "plain-model-config")  # the model train builds for the embedded job
    flags = ("--config_name", str(cfg.output / "plain-model-config"), "--tokenizer_name", str(tokenizer_dir))
    # The same job: train's own defaults for the embedded model (those bench does not set for both).
    given = set(common_training_flags(cfg))
    job = [(f"--{k}", str(v)) for k, v in EMBEDDED_TRAINING_DEFAULTS.items() if f"--{k}" not in given]
    job_flags = tuple(part for pair in job for part in pair)
    return PlainInputs(flags, str(files["train"]), str(files["validation"]), BLOCK_SIZE, job_flags)


def data_inputs(cfg: BenchConfig, plain: PlainInputs | None) -> tuple[DataInputs | None, dict[int, float]]:
    """The embedded corpus at each scale of DATA_SCALES, raw and `prepare tokenize`d; the seconds each prepare took.

    Only for the embedded job (its corpus and tokenizer are the plain script's inputs).
    """
    if "data" in cfg.skip or cfg.model or cfg.dataset or plain is None:
        return None, {}
    folder = cfg.output / "data"
    folder.mkdir(parents=True, exist_ok=True)
    text = Path(plain.train_file).read_text()
    tokenizer = plain.model_flags[plain.model_flags.index("--tokenizer_name") + 1]
    raw, prepared, seconds = {}, {}, {}
    for scale in DATA_SCALES:
        corpus = folder / f"corpus-{scale}x.txt"
        corpus.write_text(text * scale)
        raw[scale], prepared[scale] = str(corpus), str(folder / f"prepared-{scale}x")
        argv = [sys.executable, "-m", "zerokit", "prepare", "tokenize", str(corpus), "--tokenizer", tokenizer]
        argv += ["--output", prepared[scale], "--block-size", str(plain.block_size), "--overwrite"]
        started = time.time()
        done = subprocess.run(
            argv, capture_output=True, text=True, env={**os.environ, "HF_DATASETS_CACHE": str(folder / "cache")}
        )
        seconds[scale] = time.time() - started
        if done.returncode != 0:
            raise UserError(f"bench: prepare tokenize of {corpus} failed: {done.stderr.strip()[-500:]}")
    return DataInputs(raw, prepared, plain.block_size), seconds


def train_takes_micro_batch_auto(config: Path, train_args: list[str]) -> bool:
    """Whether train would take --micro-batch auto with this config and the user's train flags: the speed table's
    micro-batch row leaves bench's --batch-size out, not theirs (a batch size or HF's --auto_find_batch_size of their
    own, ZeRO-3, a config that fixes the micro-batch are refused beside it: zerokit.train.sizing.micro_batch)."""
    from zerokit.train.options import MICRO_BATCH_AUTO, TrainFlags
    from zerokit.train.sizing.micro_batch import check_options

    try:
        check_options(TrainFlags(config=str(config), micro_batch=MICRO_BATCH_AUTO), train_args)
    except UserError:
        return False
    return True


def main(argv: list[str]) -> int:
    from tqdm import tqdm

    from zerokit.bench.report import write_all
    from zerokit.bench.runner import execute

    cfg = parse(argv)
    ownership.hold_lock(cfg.output, "bench")  # one bench per folder: a second fails at once, naming this one
    record = ownership.begin(cfg.output, "bench", replace=True)  # an earlier report goes, other files stay
    if cfg.preset:
        from zerokit.bench.presets import make_inputs

        accumulation = int(flag_value(cfg.train_args, "--gradient_accumulation_steps") or 1)
        samples = cfg.steps * cfg.batch_size * max(cfg.ranks) * max(cfg.nodes) * accumulation
        made = make_inputs(cfg.preset, cfg.output, samples, cfg.block_size or 0)
        print(f"bench: preset {cfg.preset}: a GPT-2 of {made['parameters']:,} parameters, {made['corpus_tokens']:,} "
              "tokens of text")  # fmt: skip
    inputs = plain_inputs(cfg)
    data, prepare_seconds = data_inputs(cfg, inputs)
    runs = plan_runs(cfg, inputs, data)
    results = []
    with tqdm(runs, unit="run", desc="bench", file=sys.stderr) as bar:
        for run in bar:
            bar.set_postfix_str(run.name)
            results.append(execute(run, cfg.warmup_steps, cfg.hosts, cfg.run_timeout))
            write_all(cfg, results, prepare_seconds)  # after every run: a machine taken back midway leaves a report
    ownership.finish(cfg.output, record)
    for name in ("report.md", "scaling.png", "results.json"):
        print(f"bench: wrote {cfg.output / name}")
    return 0
