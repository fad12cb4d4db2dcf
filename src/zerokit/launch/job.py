"""What launch knows of the program it starts, read once from its command line: one typed record, `Job`.

torchrun never reads its training script's argv; launch must, for a few things (where the run writes, what it
resumes, the DeepSpeed config whose ops the preflight checks, the batch a script's config fixes, what a restart
rewrites). `read_job` reads them once, when the plan is made, with the flag spellings of the program's kind
(FLAGS, one table); every later step (the preflight, the supervisor's last line, the restart loop) reads the
record, and a restart's command is written from it in one function (`restarted`).

The kinds: zerokit's `train` (whose flags launch rewrites on a restart: `--resume auto`, and the accumulation
that keeps the global batch on fewer nodes), zerokit's `generate` and its other commands, a user's Python
`script` run through zerokit.launch.rank.user_script (HF's flags: its batch is checked against a fixed
train_batch_size), a `launcher` of its own (deepspeed, accelerate, torchrun), or any other `command`. What is
read of every kind alike (the output folder, `--resume`, a `--deepspeed_config`/`--deepspeed` FILE) is read as
HF's and DeepSpeed's parsers would: `--flag V` or `--flag=V`, the last one given.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path

from zerokit.foundations.errors import UserError
from zerokit.foundations.flags import flag_value
from zerokit.outputs.checkpoints import resolve_resume
from zerokit.sources.ds_configs import DEFAULT_CONFIG

TRAIN = ("-m", "zerokit", "train")  # a target's words after the interpreter (zerokit.launch.config.target_argv)
ZEROKIT = ("-m", "zerokit")
USER_SCRIPT = "zerokit.launch.rank.user_script"  # how launch runs a user's script (zerokit.launch.program)
LAUNCHERS = ("deepspeed", "accelerate", "torchrun")  # programs that start ranks of their own
# The weights save_model writes: whole, sharded (the index), legacy (.bin), or a LoRA adapter's.
FINAL_MODEL_FILES = (
    "model.safetensors",
    "model.safetensors.index.json",
    "pytorch_model.bin",
    "adapter_model.safetensors",
)


@dataclass(frozen=True)
class Spellings:
    """The flags that say each thing launch reads, for one kind of program (the first spelling given wins)."""

    output_dir: tuple[str, ...] = ("--output_dir", "--output-dir")  # HF's TrainingArguments, zerokit train's
    resume: tuple[str, ...] = ("--resume",)
    ds_config: tuple[str, ...] = ("--deepspeed_config", "--deepspeed")  # DeepSpeed's own, HF's: the first readable
    hf_deepspeed: tuple[str, ...] = ()  # HF's --deepspeed FILE, whose fixed train_batch_size the batch must make
    micro_batch: tuple[str, ...] = ()  # per rank, where launch checks the batch
    accumulation: tuple[str, ...] = ()
    memory_checkpoints: tuple[str, ...] = ()  # a restart may resume a copy in the nodes' memory instead
    compile: tuple[str, ...] = ()  # train's --compile: deepcompile adds the config's compile.deepcompile
    pp_size: tuple[str, ...] = ()  # train's --pp-size: its pipeline engine sets the config's batch sizes itself
    rewritten: bool = False  # a restart resumes it (--resume auto) and rescales its accumulation


# One table: each kind's spellings.
FLAGS: dict[str, Spellings] = {
    "train": Spellings(
        ds_config=("--config",),  # a bundled name or a file; else ZEROKIT_CONFIG, else train's default
        accumulation=("--gradient_accumulation_steps", "--gradient-accumulation-steps"),  # as HF's parser reads it
        memory_checkpoints=("--memory-checkpoints",),  # else ZEROKIT_MEMORY_CHECKPOINTS
        compile=("--compile",),  # else ZEROKIT_COMPILE
        pp_size=("--pp-size",),  # else ZEROKIT_PP_SIZE
        rewritten=True,
    ),
    "generate": Spellings(),
    "zerokit": Spellings(),  # bench, doctor
    "script": Spellings(
        hf_deepspeed=("--deepspeed",),
        micro_batch=("--per_device_train_batch_size",),
        accumulation=("--gradient_accumulation_steps",),
    ),
    "launcher": Spellings(),
    "command": Spellings(),
}
# Where a kind's own flags start in its argv: after `PYTHON -m zerokit NAME`, or `PYTHON -m USER_SCRIPT SCRIPT`.
FLAGS_START = {"train": 4, "generate": 4, "zerokit": 4, "script": 4}
# HF's defaults where a script's command line gives none, as HF hands them to DeepSpeed.
HF_MICRO_BATCH = 8
HF_ACCUMULATION = 1


@dataclass(frozen=True)
class Job:
    """The program every rank runs, as launch reads it (see the module's docstring)."""

    kind: str  # a key of FLAGS
    argv: tuple[str, ...]
    output_dir: str | None = None  # where the run writes (relative to launch's folder)
    resume: str | None = None  # --resume as given: train's `auto` or a checkpoint, a script's own
    ds_configs: tuple[str, ...] = ()  # the DeepSpeed configs it names, in the order they are read
    hf_deepspeed: str | None = None  # a script's HF --deepspeed FILE
    micro_batch: str | None = None  # as given; None: HF's default
    accumulation: str | None = None  # as given; None: the program's default
    memory_checkpoints: bool = False  # train --memory-checkpoints: a restart may resume from the nodes' memory
    deepcompile: bool = False  # train --compile deepcompile: DeepSpeed's compiler passes on (its config's compile)
    pipelined: bool = False  # train --pp-size: DeepSpeed's pipeline engine, not the Trainer


def kind_of(argv: Sequence[str]) -> str:
    """Which kind of program argv runs (launch's target: zerokit.launch.config.target_argv)."""
    words = tuple(argv)
    if words[1:4] == TRAIN:
        return "train"
    if words[1:3] == ZEROKIT and len(words) > 3:
        return "generate" if words[3] == "generate" else "zerokit"
    if words[1:3] == ("-m", USER_SCRIPT):
        return "script"
    if words and os.path.basename(words[0]) in LAUNCHERS:
        return "launcher"
    return "command"


def read_job(argv: Sequence[str], environ: Mapping[str, str]) -> Job:
    """The record of the program argv runs, read once (ZEROKIT_CONFIG: train's config where its flags name none)."""
    kind, words = kind_of(argv), tuple(argv)
    spelt, flags = FLAGS[kind], words[FLAGS_START.get(kind, 0) :]
    configs = tuple(v for f in spelt.ds_config if (v := flag_value(flags, f)) and not v.startswith("-"))
    if kind == "train":  # train always runs with one, unless `none`
        configs = configs or (environ.get("ZEROKIT_CONFIG") or DEFAULT_CONFIG,)
    return Job(
        kind,
        words,
        output_dir=first(words, spelt.output_dir),
        resume=first(words, spelt.resume),
        ds_configs=configs,
        hf_deepspeed=first(flags, spelt.hf_deepspeed),
        micro_batch=first(flags, spelt.micro_batch),
        accumulation=first(flags, spelt.accumulation),
        memory_checkpoints=memory_copies(
            train_value(flags, spelt.memory_checkpoints, environ, "ZEROKIT_MEMORY_CHECKPOINTS", kind)
        ),
        deepcompile=train_value(flags, spelt.compile, environ, "ZEROKIT_COMPILE", kind) == "deepcompile",
        pipelined=train_value(flags, spelt.pp_size, environ, "ZEROKIT_PP_SIZE", kind) is not None,
    )


def train_value(
    flags: Sequence[str], spellings: Sequence[str], environ: Mapping[str, str], variable: str, kind: str
) -> str | None:
    """A flag's value as train reads it: given, else (for train) its ZEROKIT_ variable."""
    return first(flags, spellings) or (environ.get(variable) if kind == "train" else None)


def memory_copies(every: str | None) -> bool:
    """Whether train's --memory-checkpoints K (as given) takes copies: K of 1 or more (train refuses the rest)."""
    return (every or "").strip().isdigit() and int(every or 0) > 0


def first(words: Sequence[str], spellings: Sequence[str]) -> str | None:
    """The value of the first of spellings given a value in words."""
    return next((value for flag in spellings if (value := flag_value(words, flag))), None)


def restarted(job: Job, nodes: int, first_nodes: int) -> Job:
    """The job a restart runs, on `nodes` nodes of a job first started on `first_nodes`.

    zerokit's train resumes its newest whole checkpoint (`--resume auto`, or from step 0 when there is none), unless
    its command line already says what to resume; on fewer nodes its --gradient_accumulation_steps A, where given,
    becomes A x first_nodes / nodes, which makes the run's global batch on fewer ranks, as train sets it where none
    is given (zerokit.train.sizing.global_batch); kept where that is no whole number (train then names the sizes that
    would). Any other program runs again as given (a script that resumes reads its own folder)."""
    spelt = FLAGS[job.kind]
    if not spelt.rewritten:
        return job
    start = FLAGS_START[job.kind]
    words = list(job.argv)
    for i in range(start, len(words)):
        name, equals, value = words[i].partition("=")
        if nodes == first_nodes or name not in spelt.accumulation:
            continue
        at = i if equals else i + 1
        given = value if equals else (words[at] if at < len(words) else "")
        if given.isdigit() and int(given) * first_nodes % nodes == 0:
            kept = str(int(given) * first_nodes // nodes)
            words[at] = f"{name}={kept}" if equals else kept
    resume = () if job.resume is not None else ("--resume", "auto")
    argv = (*words, *resume)
    return replace(job, argv=argv, resume=job.resume or "auto", accumulation=first(argv[start:], spelt.accumulation))


def resumes_from(job: Job) -> str | None:
    """The checkpoint the job resumes from (`--resume auto`: the newest whole one; or as given); None for a job
    that names none, or when there is none (train then starts from step 0)."""
    if job.resume != "auto" or job.output_dir is None:
        return job.resume
    try:
        found = resolve_resume("auto", Path(job.output_dir))
    except UserError:  # every checkpoint damaged: train says so itself
        return None
    return str(found) if found else None


def has_final_model(job: Job) -> bool:
    """Whether the final model of the job's run is in its output folder (relative to launch's)."""
    folder = job.output_dir
    return folder is not None and any((Path(folder) / name).is_file() for name in FINAL_MODEL_FILES)


def outputs_state(job: Job) -> str:
    """Whether the final model of the job's run is in its output folder, in words."""
    if job.output_dir is None:
        return "no --output_dir on its command line to check its outputs"
    if has_final_model(job):
        return f"the final model is in {job.output_dir}: the run's outputs are complete"
    return f"no final model in {job.output_dir}: the run's outputs are incomplete"
