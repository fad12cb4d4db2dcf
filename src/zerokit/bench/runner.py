"""Run one planned job as a subprocess and turn its ranks' StepClock files into figures."""

from __future__ import annotations

import json
import math
import os
import subprocess
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import IO

from zerokit.bench.plan import Run
from zerokit.foundations.errors import UserError
from zerokit.foundations.process_tree import STACKS_ENV, stop_tree


@dataclass(frozen=True)
class RunResult:
    name: str
    group: str
    variant: str
    nodes: int
    world_size: int
    time_to_first_step: float  # seconds from starting the command to the end of rank 0's first step
    steps_per_second: float  # after the warm-up steps, evaluations left out
    samples_per_second: float
    tokens_per_second: float
    peak_memory_bytes: list[int]  # per rank
    hosts: list[str]  # per rank
    memory_kind: str  # cpu-rss or gpu-allocated
    evals: list[tuple[int, float]]  # (step, eval loss)
    wall_seconds: float
    compiled_ops: list[str]  # ops JIT-compiled into the run's own extensions folder (the JIT run's)
    startup_phases: list[tuple[str, float]] = field(default_factory=list)  # (phase ended by, seconds), rank 0
    parameters: int | None = None  # the model's, whole (ZeRO-3's partitions counted once)
    layers: int | None = None  # the model's shape, for attention's FLOPs (bench.flops)
    hidden: int | None = None
    sequence: int | None = None  # tokens per sample
    tokens_counted: bool = False  # tokens/s from the tokens each step trained on, not full batches assumed
    save_seconds: list[float] = field(default_factory=list)  # rank 0's, a checkpoint each (the checkpoint group)
    checkpoint_bytes: int | None = None  # on disk, the last checkpoint the run kept
    checkpoint_saves: list[dict] = field(default_factory=list)  # rank 0's figures of each save (SaveFigures)
    step_quantiles: tuple[float, float, float] | None = None  # p50, p90 and max of the timed steps, seconds
    last_loss: float | None = None  # the last eval loss (a switch that moves it beyond noise is a bug)

    def as_dict(self) -> dict:
        return asdict(self)


# A run's time limit (time_limit): start-up (imports, model, data, DeepSpeed's engine; the JIT run compiles its
# ops in it), then each step, then the end once every rank has written its timings (model saved, ranks leaving).
STARTUP_ALLOWANCE_S = 600
STEP_ALLOWANCE_S = 30
EXIT_ALLOWANCE_S = 120


def time_limit(run: Run) -> int:
    """Seconds a run may take before it counts as hung: generous, so that a slow machine is not called hung."""
    return STARTUP_ALLOWANCE_S + STEP_ALLOWANCE_S * run.steps


def execute(run: Run, warmup_steps: int, hosts: tuple[str, ...], limit_s: float | None = None) -> RunResult:
    """Start the run's command, wait for it, read its timings; a failed or hung run stops the bench in one line.
    limit_s: bench --run-timeout (None: time_limit; 0: none)."""
    run.folder.mkdir(parents=True)
    if run.nodes > 1:
        (run.folder / "hostfile").write_text("".join(f"{host}\n" for host in hosts[: run.nodes]))
    log = run.folder / "log.txt"
    (run.folder / "command.txt").write_text(" ".join(run.argv) + "\n")
    started = time.time()
    with log.open("w") as out:
        code = wait_bounded(run, out, time_limit(run) if limit_s is None else limit_s)
    wall = time.time() - started
    if code != 0:
        raise UserError(f"bench run {run.name} failed (exit code {code}): see {log}")
    result = summarize(run, read_timings(run.timings, run.world_size, log), started, wall, warmup_steps)
    if run.variant == "jit" and not result.compiled_ops:
        raise UserError(f"bench run {run.name} compiled no op: the --jit-python environment has prebuilt ops")
    return result


def wait_bounded(run: Run, out: IO[str], limit: float) -> int:
    """Run the command to its end, or stop its whole tree of processes once it has hung: past `limit` seconds
    (0: never), or EXIT_ALLOWANCE_S after every rank wrote its timings. A hung run's stacks go to its log (one
    line says so)."""
    env = {**os.environ, **run.env, **STACKS_ENV}
    process = subprocess.Popen(run.argv, stdout=out, stderr=subprocess.STDOUT, env=env, start_new_session=True)
    try:
        return watch(run, process, out, limit)
    except BaseException:  # Ctrl-C or SIGTERM: the run is in a session of its own, out of the terminal's reach
        stop_tree(process.pid)
        process.wait()
        raise


def watch(run: Run, process: subprocess.Popen, out: IO[str], limit: float) -> int:
    """wait_bounded's loop: the run's exit code once it ends; UserError once it counts as hung."""
    deadline, worked = time.monotonic() + (limit or math.inf), None
    while process.poll() is None:
        if worked is None and len(list(run.timings.glob("rank-*.json"))) == run.world_size:
            worked = time.monotonic()
        if worked is not None and time.monotonic() > worked + EXIT_ALLOWANCE_S:
            hang = f"its ranks had trained and written their timings, and {EXIT_ALLOWANCE_S} s later it had not ended"
        elif time.monotonic() > deadline:
            default = f"default {STARTUP_ALLOWANCE_S} s to start, {STEP_ALLOWANCE_S} s for each of {run.steps} steps"
            hang = f"it had not ended after {limit:g} s (bench --run-timeout; {default})"
        else:
            time.sleep(1)
            continue
        out.write(f"\nbench: {hang}: every process's stacks follow (SIGABRT under PYTHONFAULTHANDLER)\n")
        out.flush()
        stop_tree(process.pid, dump_stacks=True)
        process.wait()
        raise UserError(f"bench run {run.name} hung: {hang}; stopped, its stacks are in {out.name}")
    return process.returncode


def compiled_ops(run: Run) -> list[str]:
    """Names of the ops built into the run's private TORCH_EXTENSIONS_DIR (none: it has no private one)."""
    folder = run.env.get("TORCH_EXTENSIONS_DIR")
    return sorted({so.parent.name for so in Path(folder).glob("*/*.so")}) if folder else []


def read_timings(folder: Path, world_size: int, log: Path) -> list[dict]:
    records = [json.loads(p.read_text()) for p in sorted(folder.glob("rank-*.json"))]
    if len(records) != world_size:
        raise UserError(f"{folder} holds timings of {len(records)} of {world_size} ranks: see {log}")
    return sorted(records, key=lambda r: r["rank"])


def summarize(run: Run, records: list[dict], started: float, wall: float, warmup_steps: int) -> RunResult:
    main = records[0]
    measured = main["step_seconds"][warmup_steps:]
    if not measured:
        raise UserError(f"bench run {run.name}: no step left after {warmup_steps} warm-up steps: raise --steps")
    steps_per_second = len(measured) / sum(measured)
    counted = main.get("step_tokens", [])[warmup_steps:]
    tokens_per_second = sum(counted) / sum(measured) if counted else steps_per_second * main["tokens_per_step"]
    per_sample = main.get("tokens_per_sample") or main["tokens_per_step"] / main["samples_per_step"]
    evals = sorted({int(step): loss for step, loss in main["evals"]}.items())
    return RunResult(
        name=run.name,
        group=run.group,
        variant=run.variant,
        nodes=run.nodes,
        world_size=run.world_size,
        time_to_first_step=main["first_step_end"] - started,
        steps_per_second=steps_per_second,
        samples_per_second=tokens_per_second / per_sample,
        tokens_per_second=tokens_per_second,
        peak_memory_bytes=[r["peak_memory_bytes"] for r in records],
        hosts=[r["host"] for r in records],
        memory_kind=main["memory_kind"],
        evals=evals,
        wall_seconds=wall,
        compiled_ops=compiled_ops(run),
        startup_phases=phases(main.get("startup", []), started, main["first_step_end"]),
        parameters=main.get("parameters"),
        layers=main.get("layers"),
        hidden=main.get("hidden"),
        sequence=int(per_sample),
        tokens_counted=bool(counted),
        save_seconds=main.get("save_seconds", []),
        checkpoint_bytes=checkpoint_bytes(run.folder / "output"),
        checkpoint_saves=main.get("checkpoint_saves", []),
        step_quantiles=quantiles(measured),
        last_loss=evals[-1][1] if evals else None,
    )


def quantiles(seconds: list[float]) -> tuple[float, float, float]:
    """p50, p90 and max of step times (nearest rank: with few steps, p90 is a step that was measured)."""
    ordered = sorted(seconds)

    def at(fraction: float) -> float:
        return ordered[min(len(ordered) - 1, max(0, math.ceil(fraction * len(ordered)) - 1))]

    return at(0.5), at(0.9), ordered[-1]


def checkpoint_bytes(output: Path) -> int | None:
    """The size of the newest checkpoint-N in a run's output folder (None: it kept none)."""
    kept = sorted(output.glob("checkpoint-*"), key=lambda p: int(p.name.rpartition("-")[2] or 0))
    if not kept:
        return None
    return sum(f.stat().st_size for f in kept[-1].rglob("*") if f.is_file())


def phases(marks: list, started: float, first_step_end: float) -> list[tuple[str, float]]:
    """Seconds spent in each start-up phase, named by the mark that ended it, from the command's start.

    The last phase, `first_step`, ends with rank 0's first step; the phases add up to its time to first step.
    """
    spans, previous = [], started
    for name, at in [*((str(n), float(t)) for n, t in marks), ("first_step", first_step_end)]:
        at = min(max(at, previous), first_step_end)  # /proc's start times come in 10 ms steps
        spans.append((name, at - previous))
        previous = at
    return spans
