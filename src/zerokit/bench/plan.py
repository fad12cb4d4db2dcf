"""From bench's config to the list of runs: each a command line, its environment and its folder.

Three groups: `scaling` (zerokit's train over rank and node counts), `startup` (the same job
with a DeepSpeed whose ops are not prebuilt, and a fresh extensions cache) and `overhead`
(zerokit's train and the plain HF script in tests/bench/, alternately, several times).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

from zerokit.launch.environment import free_port

SKIPPABLE = ("startup", "overhead")


@dataclass(frozen=True)
class BenchConfig:
    output: Path
    ranks: tuple[int, ...]  # ranks per node
    nodes: tuple[int, ...]
    config: Path  # DeepSpeed config
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
    model: str | None
    dataset: str | None  # a text file, or none: the embedded default
    block_size: int | None
    train_args: tuple[str, ...]  # more TrainingArguments flags, for both scripts
    on_gpu: bool


@dataclass(frozen=True)
class Run:
    name: str
    group: str
    variant: str  # zerokit, jit or plain
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


@dataclass(frozen=True)
class PlainInputs:
    """What the plain script is given for the job zerokit's train runs: model, tokenizer, text files."""

    model_flags: tuple[str, ...]
    train_file: str
    validation_file: str
    block_size: int


def common_training_flags(cfg: BenchConfig) -> list[str]:
    return [
        "--max_steps", str(cfg.steps),
        "--per_device_train_batch_size", str(cfg.batch_size),
        "--eval_strategy", "steps",
        "--eval_steps", str(cfg.eval_steps),
        "--logging_steps", str(cfg.eval_steps),
        "--save_strategy", "no",
        "--report_to", "none",
        *cfg.train_args,
    ]  # fmt: skip


def zerokit_run(cfg: BenchConfig, name: str, group: str, nodes: int, ranks: int, *, jit: bool = False) -> Run:
    folder = cfg.output / "runs" / name
    launch = ["--nproc-per-node", str(ranks)]
    if nodes > 1:
        launch += ["--launcher", cfg.launcher, "--hostfile", str(folder / "hostfile")]
    if jit:
        launch.append("--no-preflight")  # its checks would refuse ops that are not prebuilt
    train = [
        "--config",
        str(cfg.config),
        "--output-dir",
        str(folder / "output"),
        "--timings-dir",
        str(folder / "timings"),
    ]
    if cfg.model:
        train += ["--model", cfg.model]
    if cfg.dataset:
        train += ["--dataset", cfg.dataset]
    if cfg.block_size:
        train += ["--block-size", str(cfg.block_size)]
    python = cfg.jit_python if jit else cfg.python
    argv = (python, "-m", "zerokit", "launch", *launch, "train", *train, *common_training_flags(cfg))
    env = {"ZEROKIT_CACHE": str(cfg.output / "cache")}  # the embedded job's files, made once for every run
    if jit:
        env["TORCH_EXTENSIONS_DIR"] = str(folder / "torch-extensions")  # fresh: every op compiles
    return Run(name, group, "jit" if jit else "zerokit", nodes, ranks, argv, folder, env)


def plain_run(cfg: BenchConfig, name: str, ranks: int, inputs: PlainInputs) -> Run:
    folder = cfg.output / "runs" / name
    argv = [
        # The docs' `torchrun --nproc-per-node N`, on a free port (--standalone resolves the
        # hostname, which an offline container cannot).
        cfg.python, "-m", "torch.distributed.run", "--nproc-per-node", str(ranks),
        "--master-addr", "127.0.0.1", "--master-port", str(free_port()),
        str(cfg.plain_script), *inputs.model_flags,
        "--train_file", inputs.train_file, "--validation_file", inputs.validation_file,
        "--block_size", str(inputs.block_size), "--deepspeed", str(cfg.config),
        "--output_dir", str(folder / "output"), "--timings_dir", str(folder / "timings"),
    ]  # fmt: skip
    if not cfg.on_gpu:
        argv.append("--use_cpu")
    env = {} if cfg.on_gpu else {"OMP_NUM_THREADS": str(max(1, (os.cpu_count() or 1) // ranks))}  # as train does
    return Run(name, "overhead", "plain", 1, ranks, (*argv, *common_training_flags(cfg)), folder, env)


def plan_runs(cfg: BenchConfig, plain_inputs: PlainInputs | None) -> list[Run]:
    """Scaling first (its 1-rank run is the baseline), then start-up, then the alternating overhead pairs."""
    runs = [
        zerokit_run(cfg, f"scaling-{nodes}n-{ranks}r", "scaling", nodes, ranks)
        for nodes in cfg.nodes
        for ranks in cfg.ranks
    ]
    compare_ranks = max(cfg.ranks)  # on one node: start-up and overhead are per-node figures
    if "startup" not in cfg.skip and cfg.jit_python and 1 in cfg.nodes:  # compared with the 1-node run
        runs.append(zerokit_run(cfg, f"startup-jit-1n-{compare_ranks}r", "startup", 1, compare_ranks, jit=True))
    if "overhead" not in cfg.skip and plain_inputs:
        for repeat in range(1, cfg.repeats + 1):
            runs.append(zerokit_run(cfg, f"overhead-zerokit-{repeat}", "overhead", 1, compare_ranks))
            runs.append(plain_run(cfg, f"overhead-plain-{repeat}", compare_ranks, plain_inputs))
    return runs
