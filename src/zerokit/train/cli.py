"""The `train` command: flags -> TrainFlags, checked before torch is imported, then the ranks.

zerokit's own flags are parsed here; every other flag is a `TrainingArguments` flag and goes
to HfArgumentParser, so `--learning_rate`, `--max_steps`, `--bf16` ... work as in run_clm.
Input is checked before torch is imported, so a typo fails in a second, not after start-up.
"""

from __future__ import annotations

import argparse
import os
import sys
import textwrap
from collections.abc import Mapping, MutableMapping
from typing import NoReturn

from zerokit.foundations.errors import UserError
from zerokit.foundations.flags import command_parser, from_namespace, option_strings
from zerokit.sources.ds_config_check import check_ds_config
from zerokit.train.hf_flags import check_hf_flags
from zerokit.train.model.lora import parse_lora
from zerokit.train.model.switches import check_speed_switches
from zerokit.train.options import EMBEDDED_DIFFERENCE, HF_DIFFERENCES, TrainFlags
from zerokit.train.parallel import pipeline_parallel, sequence_parallel
from zerokit.train.parallel.layout import ParallelLayout
from zerokit.train.parallel.tensor_parallel import check_config, check_model_type
from zerokit.train.run import train
from zerokit.train.sizing.micro_batch import check_options as check_micro_batch


def build_parser(environ: Mapping[str, str]) -> argparse.ArgumentParser:
    return command_parser(
        TrainFlags,
        environ,
        prog="train",
        description="Train a causal LM with the HF Trainer and DeepSpeed ZeRO. With no --model/--dataset, "
        "trains the embedded default (tiny GPT-2 on a generated corpus). Any TrainingArguments flag "
        "(--learning_rate, --max_steps, --bf16, ...) is passed through and means what it means in HF.",
        epilog=hf_differences_text(),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )


def hf_differences_text() -> str:
    """Every place where train's TrainingArguments differ from a plain HF script's, for --help."""
    lines = [f"  {flag:<20} {what}" for flag, what in HF_DIFFERENCES]
    embedded = textwrap.fill(f"and {EMBEDDED_DIFFERENCE}", width=100, initial_indent="  ", subsequent_indent="  ")
    return "\n".join(["where train differs from Hugging Face's TrainingArguments defaults:", *lines, embedded])


def parse(
    argv: list[str], environ: Mapping[str, str] = os.environ, *, read_files: bool = True
) -> tuple[TrainFlags, list[str]]:
    """Split argv into zerokit's options (validated) and the TrainingArguments flags. read_files: read --dataset's
    files (False: bench's check of a preset's runs, whose corpus is made later)."""
    parser = build_parser(environ)
    namespace, hf_argv = parser.parse_known_args(argv)
    check_hf_flags(hf_argv, option_strings(parser))
    options = from_namespace(TrainFlags, namespace)
    check_config(options.tp_size, options.config, options.ds_settings)  # a missing or broken one fails now too
    model_type = "gpt2" if options.embedded else options.model_type or ""  # --model's is read in the ranks
    check_model_type(options.tp_size, model_type, embedded=options.embedded)
    sequence_parallel.check_options(options)
    pipeline_parallel.check_options(options)
    check_speed_switches(options)
    check_micro_batch(options, hf_argv)
    if options.streaming and not options.dataset:
        raise UserError("--streaming needs --dataset (the embedded corpus is small)")
    check_fine_tuning(options)
    check_memory_checkpoints(options)
    if options.from_scratch and not options.model:
        raise UserError("--from-scratch needs --model (whose config is used); or use --model-type")
    if read_files and options.dataset and environ.get("LOCAL_RANK", "0") == "0":  # once per node: read whole
        from zerokit.sources.data import check_text_files, resolve_source

        check_text_files(resolve_source(options.dataset))  # a missing, empty or binary file fails now
    return options, hf_argv


def check_memory_checkpoints(options: TrainFlags) -> None:
    """--memory-checkpoints rides on the background save (its host copy, its writer thread), which --pp-size's
    engine has not."""
    if not options.memory_checkpoints:
        return
    if options.checkpoint_write != "background":
        raise UserError(
            "--memory-checkpoints needs --checkpoint-write background (the copy is the background save's): "
            "leave --checkpoint-write sync out, or --memory-checkpoints"
        )
    if options.pp_size:
        raise UserError("--memory-checkpoints is not built for --pp-size's pipeline engine: leave one of them out")


def check_fine_tuning(options: TrainFlags) -> None:
    if options.lora is not None:
        parse_lora(options.lora)  # a bad spec fails now, not in the ranks
        if options.train_last_layers:
            raise UserError("--lora and --train-last-layers exclude each other: pick one")
    if options.merge and (options.lora is None or not options.model or options.from_scratch):
        raise UserError("--merge needs --lora and a pretrained --model (the base the adapter is merged into)")


def check_folders_and_inputs(options: TrainFlags) -> None:
    """The folders the run writes into and the inputs it reads, found now, not when it gets there: --output-dir
    (zerokit.outputs.checkpoints.check_output_dir), --timings-dir (written at the end of training, before the model
    is saved) and the memory checkpoints' folder (at the first memory checkpoint); then --model, --tokenizer and
    --dataset (zerokit.sources.run_inputs: offline, the default, a Hub name must be in the cache)."""
    from zerokit.outputs.checkpoints import check_output_dir
    from zerokit.outputs.ownership import check_writable
    from zerokit.sources.run_inputs import check_inputs
    from zerokit.train.checkpoints.node_copies.store import DEFAULT_ROOT

    check_output_dir(options.output_dir, options.overwrite, options.resume)
    if options.timings_dir is not None:
        check_writable(options.timings_dir, "--timings-dir")
    if options.memory_checkpoints:
        check_writable(options.memory_checkpoint_dir or DEFAULT_ROOT, "--memory-checkpoint-dir")
    check_inputs(
        options.model,
        options.tokenizer,
        options.dataset,
        from_scratch=options.from_scratch,
        online=options.online,
        environ=os.environ,
    )


def main(argv: list[str]) -> int:
    options, hf_argv = parse(argv)
    # Every rank checks before the rendezvous; nothing is written to the output folder before it.
    check_folders_and_inputs(options)
    layout = check_layout(options, os.environ)
    if options.ds_config:  # against DeepSpeed's own keys: imports it (seconds), so after the checks that need no torch
        check_ds_config(options.ds_config, pipelined=options.pp_size is not None)
    if options.nproc_per_node > 1:
        become(launch_argv(argv, options.nproc_per_node))
    return train(options, layout, hf_argv)


def launch_argv(argv: list[str], nproc_per_node: int) -> list[str]:
    """`train --nproc-per-node N ARGS` as the command that runs it: `zerokit launch --nproc-per-node N train ARGS`,
    each rank's argv without --nproc-per-node, so that no rank starts ranks again."""
    return [sys.executable, "-m", "zerokit", "launch", "--nproc-per-node", str(nproc_per_node), "train",
            *_without_nproc(argv)]  # fmt: skip


def become(command: list[str]) -> NoReturn:
    """Replace this process with `command`: launch then gets the terminal's Ctrl-C and a scheduler's signals
    itself (no parent to answer them first, or to leave launch behind), and its exit code is train's. The
    environment is this process's, with what the checks set (offline mode) in it."""
    sys.stdout.flush()
    sys.stderr.flush()
    os.execv(command[0], command)


def check_layout(options: TrainFlags, environ: MutableMapping[str, str]) -> ParallelLayout:
    """How the ranks divide, checked once per process and before torch: the ranks --nproc-per-node starts
    (before they start), or those of this rank's job (its scheduler's variables, or a world of 1, set here)."""
    if options.nproc_per_node > 1:
        world = per_node = options.nproc_per_node
        source = "--nproc-per-node"
    else:
        from zerokit.launch.rank.environment import ensure_rank_env

        ensure_rank_env(environ)
        world = int(environ["WORLD_SIZE"])
        per_node = int(environ.get("LOCAL_WORLD_SIZE") or world)
        source = "WORLD_SIZE, LOCAL_WORLD_SIZE"
    return ParallelLayout.check(world, per_node, source, tp=options.tp_size, pp=options.pp_size, sp=options.sp_size)


def _without_nproc(argv: list[str]) -> list[str]:
    """argv minus --nproc-per-node N, so each rank does not spawn again."""
    out, skip = [], False
    for arg in argv:
        if skip:
            skip = False
        elif arg in ("--nproc-per-node", "--nproc_per_node"):
            skip = True
        elif not arg.startswith(("--nproc-per-node=", "--nproc_per_node=")):
            out.append(arg)
    return out
