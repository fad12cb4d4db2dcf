"""From bench's config to the list of runs: each a command line, its environment and its folder.

The groups: `scaling` (zerokit's train over rank and node counts), `configs` (the same job under
each DeepSpeed config, and none), `speed` (with --preset: train's speed switches, each alone and then all
together, against the scaling run as the eager row: speed_switches), `startup` (the same job with a DeepSpeed
whose ops are not prebuilt, and a fresh extensions cache), `data` (time to first step from raw text against
`prepare tokenize`d blocks, at 1x and 10x the corpus) and `overhead` (in turn, several rounds of: zerokit's train,
the plain HF script zerokit.bench.plain_hf_trainer with the same DeepSpeed config and without DeepSpeed, the raw
DeepSpeed loop zerokit.bench.raw_deepspeed_loop, and zerokit's train without the preemption callback).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path

from zerokit.launch.rank.environment import free_port
from zerokit.train.options import MICRO_BATCH_AUTO

SKIPPABLE = ("configs", "startup", "data", "checkpoint", "overhead", "preemption", "no-deepspeed", "raw", "speed")
CHECKPOINT_SAVES = 3  # checkpoints the checkpoint group's runs write (the last one kept)
# The checkpoint group's runs, side by side: train --checkpoint-write sync and background, and background with a
# copy in host memory at every step between (--memory-checkpoints 1).
CHECKPOINT_WRITES = ("sync", "background", "memory")
DATA_SCALES = (1, 10)  # corpus sizes of the data group, in copies of the corpus
DATA_ROUNDS = 2  # of the data group: its figures are medians


@dataclass(frozen=True)
class BenchConfig:
    output: Path
    ranks: tuple[int, ...]  # ranks per node
    nodes: tuple[int, ...]
    config: Path  # DeepSpeed config
    configs: tuple[str, ...]  # the configs group: bundled names or files, "none" for no DeepSpeed
    steps: int
    warmup_steps: int  # steps left out of the throughput
    eval_steps: int
    batch_size: int  # per rank
    repeats: int  # of each side of the overhead comparison
    python: str  # this environment's interpreter
    jit_python: str | None  # an interpreter whose DeepSpeed has no prebuilt ops
    plain_script: Path | None
    hosts: tuple[str, ...]  # for node counts above 1
    launcher: str  # pdsh or mpirun, for node counts above 1
    skip: frozenset[str]
    speed: tuple[tuple[str, tuple[str, ...]], ...] = ()  # the speed group's switches: (name, train flags)
    overhead_switches: tuple[str, ...] = ()  # SHARED_SWITCHES both sides of the overhead group run with
    model: str | None = None
    dataset: str | None = None  # a text file, or none: the embedded default
    block_size: int | None = None
    train_args: tuple[str, ...] = ()  # more TrainingArguments flags, for both scripts
    on_gpu: bool = False
    peak_tflops: float | None = None  # per device, for MFU; None: from bench.flops' table (GPU) or not reported
    precision: str = "fp32"  # of the matmuls (bench.flops.precision_of the train args): which peak MFU uses
    raw_script: Path | None = None  # the raw DeepSpeed loop (zerokit.bench.raw_deepspeed_loop)
    preset: str | None = None  # bench --preset: its model and corpus are made in output
    run_timeout: float | None = None  # seconds a run may take (None: from its steps, runner.time_limit; 0: no limit)


@dataclass(frozen=True)
class Run:
    name: str
    group: str
    variant: str  # zerokit, jit, plain, zerokit-no-preemption; in the configs group the config; in data raw-1x, ...
    nodes: int
    ranks_per_node: int
    argv: tuple[str, ...]
    folder: Path
    env: dict[str, str] = field(default_factory=dict)

    @property
    def world_size(self) -> int:
        return self.nodes * self.ranks_per_node

    @property
    def timings(self) -> Path:
        return self.folder / "timings"

    @property
    def steps(self) -> int:
        """The optimizer steps it trains: its argv's last --max_steps, as the Trainer reads them."""
        at = len(self.argv) - 1 - self.argv[::-1].index("--max_steps")
        return int(self.argv[at + 1])


@dataclass(frozen=True)
class PlainInputs:
    """What the plain script is given for the job zerokit's train runs: model, tokenizer, text files."""

    model_flags: tuple[str, ...]
    train_file: str
    validation_file: str
    block_size: int
    job_flags: tuple[str, ...] = ()  # TrainingArguments train sets for this job and HF would not (embedded)


def common_training_flags(cfg: BenchConfig) -> list[str]:
    return [
        "--max_steps", str(cfg.steps),
        "--per_device_train_batch_size", str(cfg.batch_size),
        "--eval_strategy", "steps",
        "--eval_steps", str(cfg.eval_steps),
        "--logging_steps", str(cfg.eval_steps),
        "--save_strategy", "no",
        "--report_to", "none",
        # On CPU ranks every script counts the tokens of each step's batches (StepClock): a short last batch is not
        # a full one. On a GPU the count (a gather and a device sync every batch) would slow what is timed: a step
        # is counted full there. With a preset every step is one: an epoch's short last batch is dropped (a compiled
        # model would recompile for it: one 38.5 s step on the H200). HF drops the evaluation's too: the presets'
        # held-out blocks are many batches, a small validation split could be none.
        "--include_num_input_tokens_seen", "false" if cfg.on_gpu else "true",
        "--dataloader_drop_last", "true" if cfg.on_gpu and cfg.preset else "false",
        *cfg.train_args,
    ]  # fmt: skip


@dataclass(frozen=True)
class DataInputs:
    """The data group's inputs: raw text files and their `prepare tokenize`d folders, by corpus scale."""

    raw: dict[int, str]  # scale -> a .txt file
    prepared: dict[int, str]  # scale -> a prepared folder
    block_size: int


def zerokit_run(
    cfg: BenchConfig,
    name: str,
    group: str,
    nodes: int,
    ranks: int,
    *,
    jit: bool = False,
    config: str | None = None,
    variant: str | None = None,
    extra_train: tuple[str, ...] = (),
    keep_data: bool = False,
    env: dict[str, str] | None = None,
) -> Run:
    """One run of zerokit's train; extra_train: more train flags, which replace the job's --dataset and
    --block-size (the data group's) unless keep_data."""
    folder = cfg.output / "runs" / name
    config, split, size = config_and_split(config or str(cfg.config))
    launch = ["--nproc-per-node", str(ranks)]
    if nodes > 1:
        launch += ["--launcher", cfg.launcher, "--hostfile", str(folder / "hostfile")]
    if jit:
        launch.append("--no-preflight")  # its checks would refuse ops that are not prebuilt
    train = [
        "--config",
        config,
        "--output-dir",
        str(folder / "output"),
        "--timings-dir",
        str(folder / "timings"),
    ]
    if split:
        train += [SPLIT_FLAGS[split], str(size)]
    if cfg.model:
        train += ["--model", cfg.model]
    if cfg.dataset and (keep_data or not extra_train):
        train += ["--dataset", cfg.dataset]
    if cfg.block_size and (keep_data or not extra_train):
        train += ["--block-size", str(cfg.block_size)]
    python = cfg.jit_python if jit else cfg.python
    argv = (python, "-m", "zerokit", "launch", *launch, "train", *train, *extra_train, *common_training_flags(cfg))
    # ZEROKIT_CACHE: the embedded job's files, made once for every run
    run_env = {"ZEROKIT_CACHE": str(cfg.output / "cache"), **own_compile_caches(folder), **(env or {})}
    if jit:
        run_env["TORCH_EXTENSIONS_DIR"] = str(folder / "torch-extensions")  # fresh: every op compiles
    return Run(name, group, variant or ("jit" if jit else "zerokit"), nodes, ranks, argv, folder, run_env)


def speed_switches(
    on_gpu: bool, installed: Callable[[str], bool], zero_stage: int, micro_batch: bool = True
) -> tuple[tuple[str, tuple[str, ...]], ...]:
    """train's speed switches that can run here, each as (row name, train flags): the cross-entropy without the
    whole vocabulary's logits (Liger's kernel where installed on a GPU, else the torch one; not under ZeRO-3,
    which partitions the head), torch.compile and FlashAttention on a GPU (compile on CPU ranks spends most of a
    short run compiling), FlashAttention only where its package is, and on a GPU the micro-batch train chooses
    where train would take it beside the run's config and flags (`micro_batch`). The pretraining presets' dropout 0
    is in their model (zerokit.bench.presets), not a row."""
    liger = on_gpu and installed("liger_kernel")
    switches: list[tuple[str, tuple[str, ...]]] = []
    if zero_stage != 3:
        switches.append(("cross-entropy", ("--cross-entropy", "liger" if liger else "chunked")))
    if on_gpu:
        switches.append(("compile", SHARED_SWITCHES["compile"][0]))
        if installed("flash_attn"):
            switches.append(("flash-attention", SHARED_SWITCHES["flash-attention"][0]))
        if micro_batch:
            switches.append(("micro-batch", MICRO_BATCH_SWITCH))
    return tuple(switches)


# The speed switches the plain HF script and the raw loop have too, so that the overhead group can time both sides
# with them (bench --overhead-switches): name -> (train's flags, the baselines' flags). The chunked cross-entropy
# and the micro-batch chooser are zerokit's alone.
SHARED_SWITCHES = {
    "compile": (("--compile", "torch"), ("--torch_compile", "true")),
    "flash-attention": (
        ("--attn-implementation", "flash_attention_2"),
        ("--attn_implementation", "flash_attention_2"),
    ),
}


def shared_switch_flags(names: tuple[str, ...], side: int) -> tuple[str, ...]:
    """The flags of the overhead group's switches: side 0 for train, 1 for the baselines."""
    return tuple(word for name in names for word in SHARED_SWITCHES[name][side])


# The largest micro-batch that fits, train's chooser: a run with it leaves out bench's --batch-size.
MICRO_BATCH_SWITCH = ("--micro-batch", MICRO_BATCH_AUTO)


def without_batch_size(argv: tuple[str, ...]) -> tuple[str, ...]:
    at = argv.index("--per_device_train_batch_size")
    return argv[:at] + argv[at + 2 :]


def speed_runs(cfg: BenchConfig, ranks: int) -> list[Run]:
    """Each switch alone, then all of them where there are two or more (one switch's `all` would be its own run
    again): the eager row is the scaling run of the same ranks."""
    rows = list(cfg.speed)
    if len(rows) > 1:
        rows.append(("all", tuple(word for _, flags in cfg.speed for word in flags)))
    return [speed_run(cfg, name, flags, ranks) for name, flags in rows]


def speed_run(cfg: BenchConfig, name: str, flags: tuple[str, ...], ranks: int) -> Run:
    """One row of the speed table. It reports no start-up, so its compiled runs keep the user's torch.compile caches:
    a second call of a GPU lease reuses the kernels of the first (own_compile_caches)."""
    run = zerokit_run(cfg, f"speed-{name}", "speed", 1, ranks, variant=name, extra_train=flags, keep_data=True)
    run = replace(run, env={key: value for key, value in run.env.items() if key not in COMPILE_CACHES})
    return replace(run, argv=without_batch_size(run.argv)) if MICRO_BATCH_SWITCH[0] in flags else run


def checkpoint_run(cfg: BenchConfig, ranks: int, write: str) -> Run:
    """The main job saving a checkpoint every few steps, written `write` (train --checkpoint-write: sync or
    background; memory: background, and a memory checkpoint at every other step): what a save costs against a step
    (StepClock's save_seconds: the stall it puts on training) and how long the write takes (its checkpoint_saves),
    so that a user can pick --save_steps and --memory-checkpoints."""
    run = zerokit_run(cfg, f"checkpoint-{ranks}r-{write}", "checkpoint", 1, ranks, variant=write)
    argv = list(run.argv)
    at = argv.index("--save_strategy")  # common_training_flags' "no"; the user's flags, after it, still win
    argv[at : at + 2] = ["--save_strategy", "steps", "--save_steps", str(max(1, cfg.steps // CHECKPOINT_SAVES))]
    argv[at + 4 : at + 4] = ["--save_total_limit", "1"]
    train = argv.index("train") + 1
    argv[train:train] = ["--checkpoint-write", "sync" if write == "sync" else "background"]
    if write == "memory":
        argv[train:train] = ["--memory-checkpoints", "1"]
    return replace(run, argv=tuple(argv))


def data_run(cfg: BenchConfig, kind: str, scale: int, ranks: int, inputs: DataInputs, round_: int) -> Run:
    """Time to first step only: a few steps, no evaluation, a fresh datasets cache (raw text tokenizes)."""
    name = f"data-{kind}-{scale}x-{round_}"
    folder = cfg.output / "runs" / name
    dataset = ("--dataset", inputs.raw[scale], "--block-size", str(inputs.block_size))
    if kind == "prepared":
        dataset = ("--dataset", inputs.prepared[scale])
    steps = ("--max_steps", str(cfg.warmup_steps + 3), "--eval_strategy", "no")
    env = {"HF_DATASETS_CACHE": str(folder / "datasets-cache")}
    run = zerokit_run(cfg, name, "data", 1, ranks, variant=f"{kind}-{scale}x", extra_train=dataset, env=env)
    return Run(run.name, run.group, run.variant, 1, ranks, (*run.argv, *steps), run.folder, run.env)


COMPILE_CACHES = ("TORCHINDUCTOR_CACHE_DIR", "TRITON_CACHE_DIR")


def own_compile_caches(folder: Path) -> dict[str, str]:
    """A run's own torch.compile caches, empty when it starts, so that its time to first step includes its compile.
    Shared (the default: one per user), they let a compiled run reuse the kernels of the one before it: on CPU ranks a
    compiled zerokit run's first step took 36 s and the plain script's after it 15 s (bench --overhead-switches
    compile), a start-up ratio of 2.4 that measured the cache; 44 s and 44 s with a cache each."""
    return dict(zip(COMPILE_CACHES, (str(folder / "inductor-cache"), str(folder / "triton-cache")), strict=True))


# The overhead group's baselines: variant -> (script, with --config's DeepSpeed config).
BASELINES = {
    "plain": ("plain_script", True),
    "plain-no-deepspeed": ("plain_script", False),
    "raw": ("raw_script", True),
}


def plain_run(cfg: BenchConfig, name: str, ranks: int, inputs: PlainInputs, variant: str = "plain") -> Run:
    """A baseline of the overhead group (BASELINES): the plain HF script, with or without DeepSpeed, or the raw loop."""
    script, with_deepspeed = BASELINES[variant]
    folder = cfg.output / "runs" / name
    argv = [
        # The docs' `torchrun --nproc-per-node N`, on a free port (--standalone resolves the
        # hostname, which an offline container cannot).
        cfg.python, "-m", "torch.distributed.run", "--nproc-per-node", str(ranks),
        "--master-addr", "127.0.0.1", "--master-port", str(free_port()),
        str(getattr(cfg, script)), *inputs.model_flags,
        "--train_file", inputs.train_file, "--validation_file", inputs.validation_file,
        "--block_size", str(inputs.block_size), *(("--deepspeed", str(cfg.config)) if with_deepspeed else ()),
        "--output_dir", str(folder / "output"), "--timings_dir", str(folder / "timings"), *inputs.job_flags,
        *shared_switch_flags(cfg.overhead_switches, 1),
    ]  # fmt: skip
    if not cfg.on_gpu:
        argv.append("--use_cpu")
    env = own_compile_caches(folder)
    if not cfg.on_gpu:
        env["OMP_NUM_THREADS"] = str(max(1, (os.cpu_count() or 1) // ranks))  # as train does
    return Run(name, "overhead", variant, 1, ranks, (*argv, *common_training_flags(cfg)), folder, env)


# A configs-group entry's suffix: the model split over N ranks (+tpN: train --tp-size N, +ppN: --pp-size N).
SPLIT_FLAGS = {"tp": "--tp-size", "pp": "--pp-size"}


def config_label(config: str) -> str:
    name, split, size = config_and_split(config)
    label = Path(name).stem if name.endswith(".json") else name
    return f"{label}+{split}{size}" if split else label


def config_and_split(config: str) -> tuple[str, str, int]:
    """A configs-group entry: a config (a bundled name or a file), with `+tpN` for train --tp-size N or `+ppN`
    for train --pp-size N: (config, "tp" or "pp" or "", N)."""
    for split in SPLIT_FLAGS:
        name, plus, size = config.rpartition(f"+{split}")
        if plus and size.isdigit() and name:
            return name, split, int(size)
    return config, "", 1


def plan_runs(cfg: BenchConfig, plain_inputs: PlainInputs | None, data_inputs: DataInputs | None = None) -> list[Run]:
    """Scaling first (its 1-rank run is the baseline), then configs, start-up, speed, checkpoint, data, then the
    overhead rounds."""
    runs = [
        zerokit_run(cfg, f"scaling-{nodes}n-{ranks}r", "scaling", nodes, ranks)
        for nodes in cfg.nodes
        for ranks in cfg.ranks
    ]
    compare_ranks = max(cfg.ranks)  # on one node: start-up and overhead are per-node figures
    if "configs" not in cfg.skip and 1 in cfg.nodes:  # the scaling run of compare_ranks is --config's row
        for config in cfg.configs:
            if config_label(config) != config_label(str(cfg.config)):
                label = config_label(config)
                runs.append(
                    zerokit_run(cfg, f"configs-{label}", "configs", 1, compare_ranks, config=config, variant=label)
                )
    if "startup" not in cfg.skip and cfg.jit_python and 1 in cfg.nodes:  # compared with the 1-node run
        runs.append(zerokit_run(cfg, f"startup-jit-1n-{compare_ranks}r", "startup", 1, compare_ranks, jit=True))
    if "speed" not in cfg.skip and 1 in cfg.nodes:
        runs += speed_runs(cfg, compare_ranks)
    if "checkpoint" not in cfg.skip and 1 in cfg.nodes:
        runs += [checkpoint_run(cfg, compare_ranks, write) for write in CHECKPOINT_WRITES]
    if "data" not in cfg.skip and data_inputs:
        for round_ in range(1, DATA_ROUNDS + 1):
            for scale in DATA_SCALES:
                for kind in ("raw", "prepared"):
                    runs.append(data_run(cfg, kind, scale, compare_ranks, data_inputs, round_))
    if "overhead" not in cfg.skip and plain_inputs:
        from zerokit.train.callbacks.preemption import (
            BENCH_WITHOUT_VARIABLE,  # imports transformers: not for bench's --help
        )

        without = {BENCH_WITHOUT_VARIABLE: "1"}
        baselines = ["plain"]
        baselines += [] if "no-deepspeed" in cfg.skip else ["plain-no-deepspeed"]
        baselines += [] if "raw" in cfg.skip or cfg.raw_script is None else ["raw"]
        switched = shared_switch_flags(cfg.overhead_switches, 0)  # train's; plain_run adds the baselines' own
        for repeat in range(1, cfg.repeats + 1):  # one round: zerokit, the baselines, zerokit without the callback
            name = f"overhead-zerokit-{repeat}"
            runs.append(zerokit_run(cfg, name, "overhead", 1, compare_ranks, extra_train=switched, keep_data=True))
            for variant in baselines:
                runs.append(plain_run(cfg, f"overhead-{variant}-{repeat}", compare_ranks, plain_inputs, variant))
            if "preemption" not in cfg.skip:
                name = f"overhead-no-preemption-{repeat}"
                variant = "zerokit-no-preemption"
                runs.append(
                    zerokit_run(
                        cfg, name, "overhead", 1, compare_ranks, variant=variant, env=without, extra_train=switched,
                        keep_data=True,
                    )
                )  # fmt: skip
    return runs
