"""`train(options, layout, training_flags)`: one rank's whole run, with no command line involved.

It builds the run (zerokit.train.training_run's TrainingRun) and hands it to its engine: the Trainer
(zerokit.train.engines.hf_engine), or DeepSpeed's pipeline engine under --pp-size
(zerokit.train.engines.pipeline_engine). training_flags are TrainingArguments flags as HF spells them (`--learning_rate
3e-4`); the defaults are HF's but for the embedded model's (training_defaults). The rank's torch.distributed variables
come from its scheduler or make it rank 0 of 1 (zerokit.launch.rank.environment), set before the layout is checked.
"""

from __future__ import annotations

import os
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import Any, NoReturn

from zerokit.foundations.errors import UserError
from zerokit.outputs.ownership import OutputRecord
from zerokit.train.checkpoints.node_copies.saver import MemoryPlan
from zerokit.train.checkpoints.resharded import Resharding
from zerokit.train.checkpoints.writer import SaveLog
from zerokit.train.data.datasets import block_length, check_full_batches, load_datasets, prepared_info
from zerokit.train.model.loading import check_limits, fine_tuning, load_model, load_tokenizer, model_config
from zerokit.train.options import (
    TrainFlags,
    ds_config_argument,
    given_fields,
    training_defaults,
)
from zerokit.train.parallel import sequence_parallel
from zerokit.train.parallel.layout import ParallelLayout
from zerokit.train.parallel.tensor_parallel import check_model
from zerokit.train.sizing.memory_check import check_memory
from zerokit.train.sizing.memory_need import Setup, count
from zerokit.train.training_run import TrainingRun


class FlagsRefused(UserError):
    """Every rank builds the same TrainingArguments from the same flags: rank 0 says what is refused."""

    every_rank = True


def train(options: TrainFlags, layout: ParallelLayout, training_flags: Sequence[str] = ()) -> int:
    """Build everything and train; called once per rank.

    layout: how the job's ranks divide, checked against its world (ParallelLayout.check; the `train` command
    checks it before torch, from the rank's variables that zerokit.launch.rank.environment.ensure_rank_env sets).
    """
    from zerokit.foundations.startup_marks import mark
    from zerokit.launch.rank import progress

    progress.start(os.environ, collectives=True, trainer_steps=True)  # launch's stall watch, when it asked for one
    warnings.filterwarnings("ignore", category=FutureWarning)
    import torch
    from transformers import set_seed
    from transformers.trainer_utils import enable_full_determinism

    from zerokit.outputs.checkpoints import check_pipeline_resume, resolve_resume
    from zerokit.outputs.universal import needs_conversion
    from zerokit.train.callbacks.preemption import BENCH_WITHOUT_VARIABLE, PreemptionCallback
    from zerokit.train.callbacks.run_record import RunRecorder
    from zerokit.train.checkpoints.resume_match import check_resume_match, precision

    mark("imports")
    preemption = PreemptionCallback()  # from now on SIGTERM/SIGUSR1 mean: checkpoint at the step end
    pipelined = layout.pp is not None
    notes: list[str] = []
    memory = MemoryPlan.of(options.memory_checkpoints, options.memory_checkpoint_dir, options.output_dir)
    recovery = None
    if memory is not None:  # a restart rebuilds the newest checkpoint the nodes' memory holds, before it is looked for
        from zerokit.train.checkpoints.node_copies.recovery import recover, store_of

        store = store_of(memory.root, options.output_dir)
        recovery = recover(store, options.output_dir, os.environ, resume_auto=options.resume == "auto")
        mark("memory_recovery")
    rebuilt = recovery is not None and recovery["source"] == "memory"  # every rank resumes the one rank 0 published
    resume = resolve_resume(recovery["checkpoint"] if rebuilt else options.resume, options.output_dir, notes)
    if resume:
        check_pipeline_resume(resume, layout.as_record() if pipelined else None)
    convert = needs_conversion(resume, layout.world, layout.tp) if resume and not pipelined else None
    resharded = None if convert is None else Resharding(resume, layout.world, layout.dp, convert)
    prepared = prepared_info(options)

    on_gpu = torch.cuda.is_available()
    args = training_arguments(options, training_flags, resharded, on_gpu, notes)
    mark("arguments")
    join_process_group(args, deepspeed=options.ds_settings is not None, verbose=options.verbose)
    mark("process_group")
    if recovery is not None and args.process_index == 0:  # every rank has read the recovery's end by now
        from zerokit.train.checkpoints.node_copies.recovery import forget_meetings

        forget_meetings(options.output_dir)
    tokenizer = load_tokenizer(options)
    mark("tokenizer")
    config = model_config(options, tokenizer)
    if resume:  # the checkpoint's model and precision, before it is converted or the folder claimed
        check_resume_match(resume, config.to_dict(), precision(args))
    if resharded is not None:
        resharded.convert_once(args.process_index)  # rank 0, once, where the checkpoint has no universal form yet
    check_limits(options, tokenizer, config, prepared)  # every rank alike, before anything is written or loaded
    check_model(options.tp_size, config)
    sequence_parallel.check_model(options.sp_size, config)
    sequence_parallel.check_ranks(options.sp_size, layout.world, on_gpu)
    numbers = check_memory(options, args, config, layout.world, on_gpu)  # before the model is built
    if memory is not None:  # every rank alike, as check_memory
        from zerokit.train.checkpoints.node_copies.store import check_room, copies_need, copy_bytes

        node_ranks = int(os.environ.get("LOCAL_WORLD_SIZE") or layout.world)
        share = copy_bytes(numbers.parameters, numbers.trainable, node_ranks, layout.world)
        check_room(memory.root, copies_need(share))
    start = _start_message(options, resume, resharded is not None, config, numbers.parameters)
    hold_output_dir(options, args.process_index, disk_need(numbers, args.save_strategy != "no"))
    if args.full_determinism:
        enable_full_determinism(args.seed)
    else:
        set_seed(args.seed)

    model = fine_tuning(options, load_model(options, config), args)
    mark("model")
    datasets = load_datasets(options, tokenizer, model, args, prepared)
    if not pipelined:  # the stages' engine takes neither flag (zerokit.train.engines.pipeline_engine)
        check_full_batches(datasets, args, layout.dp, micro_batch_chosen=bool(options.micro_batch))
    if layout.sp > 1 and datasets.get("validation") is not None:
        batch = args.per_device_eval_batch_size
        datasets["validation"] = sequence_parallel.whole_eval_batches(datasets["validation"], batch, notes)
    mark("data")
    micro_batch = None
    if options.micro_batch:  # the largest that fits, with the model and data in memory (sizing.micro_probe)
        from zerokit.train.sizing.micro_probe import choose_micro_batch

        accumulation_given = "gradient_accumulation_steps" in given_fields(training_flags)
        micro_batch = choose_micro_batch(options, args, model, datasets["train"], numbers, resume, accumulation_given)
        mark("micro_batch")
    record = claim_output_dir(options, resume, args.process_index)  # its inputs passed: the run may write now
    if os.environ.get(BENCH_WITHOUT_VARIABLE) == "1":
        preemption = None
    callbacks = [] if preemption is None else [preemption]
    saves = SaveLog(options.checkpoint_write)  # what each checkpoint cost: the Trainer fills it, these record it
    if options.timings_dir:
        from zerokit.train.callbacks.step_clock import StepClock

        shared = layout.model_parallel  # ranks per data-parallel replica
        split = layout.tp * (layout.pp or 1) > 1  # sequence parallel splits the tokens, not the model
        whole = model.num_parameters() if split else None  # before AutoTP or the stages split it
        tokens = block_length(datasets["train"])
        clock = StepClock(
            options.timings_dir, tokens_per_sample=tokens, model_parallel=shared, parameters=whole, saves=saves
        )
        callbacks.append(clock)
    # zerokit-run.json in the output folder and each checkpoint: what this run ran on.
    callbacks.append(
        RunRecorder(
            options,
            resume=resume,
            rank=args.process_index,
            layout=layout.as_record(),
            claim=record,
            saves=saves,
            micro_batch=micro_batch.as_record() if micro_batch else None,
            memory_recovery=recovery,
            memory_every=options.memory_checkpoints,
        )
    )
    run = TrainingRun(
        options=options,
        args=args,
        model=model,
        tokenizer=tokenizer,
        datasets=datasets,
        layout=layout,
        resume=resume,
        start=start,
        notes=notes,
        callbacks=callbacks,
        record=record,
        preemption=preemption,
        saves=saves,
        memory=memory,
    )
    if pipelined:
        from zerokit.train.engines.pipeline_engine import PipelineRun

        return run.execute(PipelineRun)
    from zerokit.train.engines.hf_engine import TrainerEngine

    return run.execute(TrainerEngine)


# Said, not changed: dropping the short batch is HF's --dataloader_drop_last, which drops the evaluation's too.
COMPILED_SHORT_BATCH = (
    "--compile: an epoch's short last batch recompiles the model once (on an H200, one 38.5 s step for GPT-2 small); "
    "--dataloader_drop_last drops it (the evaluation's too)"
)


def training_arguments(
    options: TrainFlags, training_flags: Sequence[str], resharded: Resharding | None, on_gpu: bool, notes: list[str]
):
    """The run's TrainingArguments: the flags given over zerokit's defaults, and what zerokit's options force; on a
    resharded resume, the gradient accumulation that keeps the checkpoint's global batch (said in notes)."""
    import torch
    from transformers import HfArgumentParser

    from zerokit.train.secret_free import SecretFreeArguments

    class Parser(HfArgumentParser):
        def error(self, message: str) -> NoReturn:  # a choice not offered (--optim bogus): one line, not the usage
            raise FlagsRefused(f"{message} (`zerokit train --help` lists zerokit's flags; TrainingArguments' are HF's)")

    parser = Parser(SecretFreeArguments, allow_abbrev=False)  # training_args.bin holds no token
    parser.set_defaults(**training_defaults(options.embedded, training_flags))
    parser.set_defaults(logging_nan_inf_filter=False)  # HF_DIFFERENCES: zerokit.train.callbacks.finite_loss instead
    if on_gpu and torch.cuda.is_bf16_supported() and not parser.parse_known_args(training_flags)[0].fp16:
        parser.set_defaults(bf16=True)  # where the user asks for fp16, bf16 beside it is HF's error
    forced = ["--output_dir", str(options.output_dir)]
    if options.ds_settings:
        config = ds_config_argument(
            options.ds_settings,
            deterministic_cpu=options.deterministic and not on_gpu,
            load_universal=resharded is not None,
            tp_size=options.tp_size,
            deepcompile=options.compile == "deepcompile",
        )
        forced += ["--deepspeed", config]
    if options.compile != "off":
        forced += ["--torch_compile", "true"]
        if "dataloader_drop_last" not in given_fields(training_flags):
            notes.append(COMPILED_SHORT_BATCH)
    if not on_gpu:
        forced += ["--use_cpu", "true"]
    if options.deterministic:
        forced += ["--full_determinism", "true"]
    if resharded is not None and not options.micro_batch:  # --micro-batch auto keeps the global batch itself
        forced += resharded.accumulation_flags(*given_batch(parser, [*training_flags, *forced]), notes)
    given = parser.parse_known_args([*training_flags, *forced])[0]
    check_trainer_inputs(given.report_to, given.torch_compile_backend)  # before TrainingArguments warn about them
    try:
        (args,) = parser.parse_args_into_dataclasses([*training_flags, *forced])
    except ValueError as error:  # TrainingArguments' own checks of the flags together (fp16 with bf16, ...)
        raise FlagsRefused(f"HF's TrainingArguments: {' '.join(str(error).split())}") from None
    if options.streaming and args.max_steps <= 0:
        raise UserError("--streaming has no length to plan epochs from: pass --max_steps N")
    check_config_matches(options, args)
    if options.sp_size > 1:  # the Trainer takes it from its arguments, not from a flag
        args.parallelism_config = sequence_parallel.parallelism_config(
            options.sp_size, args.world_size, options.attn_implementation
        )
    return args


# The DeepSpeed config's batch sizes, which --micro-batch auto (zerokit.train.sizing.micro_probe.rebatch) and HF's
# --auto_find_batch_size fill anew once they have chosen.
BATCH_SIZES = ("train_micro_batch_size_per_gpu", "gradient_accumulation_steps", "train_batch_size")


def check_config_matches(options: TrainFlags, args: Any) -> None:
    """A DeepSpeed config value that disagrees with the flags (a train_batch_size of 7 where the flags make 16):
    HF's Trainer refuses it only when it starts DeepSpeed, after the run claimed its folder, in a traceback. Its
    list is made with the TrainingArguments (trainer_config_process): read it here."""
    config = getattr(args, "hf_deepspeed_config", None)
    mismatches = [line.removeprefix("- ").strip() for line in config.mismatches] if config is not None else []
    if options.micro_batch or args.auto_find_batch_size:  # the batch is chosen later, and checked again then
        mismatches = [line for line in mismatches if line.split("=")[0].removeprefix("ds ") not in BATCH_SIZES]
    if not mismatches:
        return
    found = "; ".join(mismatches)
    raise FlagsRefused(
        f"DeepSpeed config {options.ds_config}: its values disagree with the flags ({found}): set those keys to "
        '"auto" (the Trainer fills them from the flags), or change the flags'
    )


def check_trainer_inputs(report_to: str | list[str] | None, backend: str | None) -> None:
    """What the Trainer would refuse only once it is built, after the run claimed its folder: a --report_to whose
    package this environment lacks, a --torch_compile_backend accelerate does not know."""
    from accelerate.utils import DynamoBackend
    from transformers.integrations import INTEGRATION_TO_CALLBACK, get_available_reporting_integrations
    from transformers.integrations.integration_utils import is_azureml_available

    # HF's list leaves azure_ml out where mlflow is installed (which then reports), and never names flyte (its
    # callback checks flytekit itself): neither is refused here for that.
    available = set(get_available_reporting_integrations())
    if is_azureml_available():
        available.add("azure_ml")
    for name in [report_to] if isinstance(report_to, str) else report_to or []:
        if name in ("none", "all", "flyte") or name in available:
            continue
        if name not in INTEGRATION_TO_CALLBACK:
            known = ", ".join(sorted(INTEGRATION_TO_CALLBACK))
            raise FlagsRefused(f"--report_to {name}: not one of HF's integrations ({known}, none, all)")
        raise FlagsRefused(
            f"--report_to {name} needs its package, which this environment lacks: add it to the image "
            "(docs/extra-packages.md), or --report_to none"
        )
    backends = sorted(b.value.lower() for b in DynamoBackend)
    if backend is not None and backend.lower() not in backends:
        raise FlagsRefused(f"--torch_compile_backend {backend}: not one of {', '.join(backends)}")


def given_batch(parser, flags: list[str]) -> tuple[int, int | None]:
    """The micro batch flags train with, and their --gradient_accumulation_steps (None: not given), read before
    TrainingArguments exist: building them starts the process group and fills DeepSpeed's batch sizes."""
    namespace, _ = parser.parse_known_args(flags)
    given = "gradient_accumulation_steps" in given_fields(flags)
    return namespace.per_device_train_batch_size, namespace.gradient_accumulation_steps if given else None


def hold_output_dir(options: TrainFlags, rank: int, needed: int) -> None:
    """Every rank checks the output folder's disk for `needed` bytes (disk_need); rank 0 then locks the folder
    (zerokit.outputs.ownership.hold_lock), before the model and data load: a second run into it fails at once."""
    import shutil

    import torch.distributed as dist

    from zerokit.outputs import ownership

    free = shutil.disk_usage(ownership.existing_parent(options.output_dir)).free
    if free < needed:
        raise UserError(
            f"--output-dir {options.output_dir} has {free / 2**20:.0f} MiB free, and the run needs about "
            f"{needed / 2**20:.0f} MiB there (the model, and one checkpoint when it saves): free space there or "
            "pick another --output-dir"
        )
    if rank == 0:
        ownership.hold_lock(options.output_dir, "train")
        ownership.read_record(options.output_dir)  # a damaged record is refused now, not once the data has loaded
    if dist.is_available() and dist.is_initialized():
        dist.barrier()


def claim_output_dir(options: TrainFlags, resume: Path | None, rank: int) -> OutputRecord | None:
    """Rank 0 records the run in its output folder (zerokit.outputs.ownership.begin), once the run's model, data
    and micro-batch have passed their checks: a run refused before leaves the folder as it was.

    --overwrite without --resume first removes what an earlier run wrote there (its model, its
    checkpoints), so neither rotation nor a later `--resume auto` mistakes them for this run's.
    Returns the record on rank 0, None on the others.
    """
    import torch.distributed as dist

    from zerokit.outputs import ownership

    record = None
    if rank == 0:
        record = ownership.begin(options.output_dir, "train", replace=options.overwrite and resume is None)
    if dist.is_available() and dist.is_initialized():
        dist.barrier()
    return record


def disk_need(numbers: Setup, saves_checkpoints: bool) -> int:
    """Bytes the output folder's disk must hold: the fp32 weights, and a checkpoint's fp32 weights and Adam's
    two moments of what is trained."""
    weights = 4 * numbers.parameters
    return weights + (weights + 8 * numbers.trainable if saves_checkpoints else 0)


def join_process_group(args, deepspeed: bool, verbose: bool) -> None:
    """Join the process group before the model is built.

    ZeRO-3 partitions the model while it is built (zero.Init) and needs the real world size
    then. TrainingArguments sets up devices lazily, and on CPU accelerate starts torch.distributed
    but not deepspeed.comm, which zero.Init asks; so both are started here. DeepSpeed's line for its
    prebuilt shared-memory op is said only with --verbose (zerokit.launch.rank.quiet_ops).
    """
    import torch.distributed as dist

    if deepspeed:
        from zerokit.launch.rank.quiet_ops import quiet_op_loads

        quiet_op_loads(verbose)
    _ = args.device  # accelerate's device and process-group setup
    if deepspeed and dist.is_initialized():
        import deepspeed as ds

        from zerokit.cluster.shm_segments import release_own_segment

        ds.init_distributed(dist_backend=dist.get_backend())
        if dist.get_backend() == "gloo":  # CPU ranks: DeepSpeed's all-reduce segments are mapped by now
            dist.barrier()
            release_own_segment()


def _start_message(options: TrainFlags, resume: Path | None, universal: bool, config, parameters: int) -> str:
    """Where the run starts; a fresh config (--model-type, --from-scratch) also says the model it makes."""
    line = _resume_message(options, resume, universal)
    if options.model_type or options.from_scratch:
        line += f" (a fresh {config.model_type} model: {count(parameters)} parameters)"
    return line


def _resume_message(options: TrainFlags, resume: Path | None, universal: bool) -> str:
    if resume:
        return f"zerokit: resuming from {resume}" + (" (its universal form: another rank count)" if universal else "")
    if options.resume == "auto":
        return f"zerokit: no complete checkpoint in {options.output_dir}: starting from step 0"
    return "zerokit: starting from step 0"
