"""The figures derived from the runs, and the three files: results.json, report.md, scaling.png."""

from __future__ import annotations

import json
import math
import os
import platform
import socket
import statistics
import time
from pathlib import Path

from zerokit.bench.flops import flops_per_token, mfu, peak_tflops
from zerokit.bench.plan import BenchConfig, config_label
from zerokit.bench.runner import RunResult

MIB = 1024 * 1024


def run_mfu(r: RunResult, tokens_per_second: float, peak: float | None) -> float | None:
    """MFU of a run at tokens_per_second (6N + attention, bench.flops); None without a peak or the model's shape."""
    if not (peak and r.parameters and r.layers and r.hidden and r.sequence):
        return None
    return mfu(tokens_per_second, flops_per_token(r.parameters, r.layers, r.hidden, r.sequence), r.world_size, peak)


def scaling_rows(results: list[RunResult]) -> list[dict]:
    """One row per scaling run; efficiency = samples/s per rank against the smallest run's."""
    runs = sorted((r for r in results if r.group == "scaling"), key=lambda r: (r.world_size, r.nodes))
    if not runs:
        return []
    per_rank = runs[0].samples_per_second / runs[0].world_size
    return [
        {
            "ranks": r.world_size,
            "nodes": r.nodes,
            "time_to_first_step_s": r.time_to_first_step,
            "steps_per_s": r.steps_per_second,
            "samples_per_s": r.samples_per_second,
            "tokens_per_s": r.tokens_per_second,
            "peak_memory_per_rank_mib": max(r.peak_memory_bytes) / MIB,
            "memory_kind": r.memory_kind,
            "eval_loss": r.evals,
            "efficiency": r.samples_per_second / (r.world_size * per_rank),
        }
        for r in runs
    ]


def startup_summary(results: list[RunResult]) -> dict | None:
    """Time to first step with prebuilt ops (the scaling run of the same shape) and with JIT ops."""
    jit = next((r for r in results if r.variant == "jit"), None)
    if jit is None:
        return None
    prebuilt = next(r for r in results if r.group == "scaling" and (r.nodes, r.world_size) == (1, jit.world_size))
    return {
        "ranks": jit.world_size,
        "prebuilt_s": prebuilt.time_to_first_step,
        "jit_s": jit.time_to_first_step,
        "saved_s": jit.time_to_first_step - prebuilt.time_to_first_step,
        "jit_over_prebuilt": jit.time_to_first_step / prebuilt.time_to_first_step,
        "compiled_ops": jit.compiled_ops,
    }


def ratio_spread(numerators: list[float], denominators: list[float]) -> dict:
    """The ratio of the medians, and the min/max of the ratios of the runs paired in order (one round each)."""
    pairs = [n / d for n, d in zip(numerators, denominators, strict=False)]
    return {
        "ratio": statistics.median(numerators) / statistics.median(denominators),
        "pair_min": min(pairs),
        "pair_max": max(pairs),
        "pairs": pairs,
    }


def side(runs: list[RunResult]) -> dict:
    return {
        "samples_per_s": [r.samples_per_second for r in runs],
        "tokens_per_s": [r.tokens_per_second for r in runs],
        "time_to_first_step_s": [r.time_to_first_step for r in runs],
        "median_samples_per_s": statistics.median(r.samples_per_second for r in runs),
        "median_tokens_per_s": statistics.median(r.tokens_per_second for r in runs),
        "median_time_to_first_step_s": statistics.median(r.time_to_first_step for r in runs),
        "startup_phases": median_phases(runs),
        # p50, p90 and max of the timed steps: each the median over the runs
        "step_quantiles_s": [statistics.median(r.step_quantiles[i] for r in runs) for i in range(3)]
        if all(r.step_quantiles for r in runs)
        else None,
    }


def median_phases(runs: list[RunResult]) -> list[tuple[str, float]]:
    """Each start-up phase's median seconds, in the order of the first run (phases all runs have)."""
    if not runs or not runs[0].startup_phases:
        return []
    by_run = [dict(r.startup_phases) for r in runs]
    return [
        (name, statistics.median(spans[name] for spans in by_run))
        for name, _ in runs[0].startup_phases
        if all(name in spans for spans in by_run)
    ]


OVERHEAD_VARIANTS = ("zerokit", "plain", "plain-no-deepspeed", "raw", "zerokit-no-preemption")


def overhead_summary(
    results: list[RunResult], peak: float | None = None, switches: tuple[str, ...] = ()
) -> dict | None:
    """Medians of zerokit's train and the baselines, run in turn; ratios zerokit / plain with their spread.

    With the raw DeepSpeed loop's runs, zerokit / raw too; with the `zerokit-no-preemption` runs, the
    preemption callback's cost: with / without. peak: TFLOPS per device, for each side's model FLOPs
    utilisation (None: not reported). switches: the speed switches every side ran with (--overhead-switches).
    """
    variants = OVERHEAD_VARIANTS
    sides = {v: [r for r in results if r.group == "overhead" and r.variant == v] for v in variants}
    if not sides["zerokit"] or not sides["plain"]:
        return None
    z, p = sides["zerokit"], sides["plain"]
    summary: dict = {"ranks": z[0].world_size, "repeats": len(p), "switches": list(switches)}
    for variant, runs in sides.items():
        if runs:
            summary[variant] = side(runs)
    throughput = ratio_spread([r.samples_per_second for r in z], [r.samples_per_second for r in p])
    startup = ratio_spread([r.time_to_first_step for r in z], [r.time_to_first_step for r in p])
    summary["throughput_ratio"], summary["throughput_spread"] = throughput["ratio"], throughput
    summary["startup_ratio"], summary["startup_spread"] = startup["ratio"], startup
    plain_spread = max(r.samples_per_second for r in p) / min(r.samples_per_second for r in p)
    summary["plain_throughput_max_over_min"] = plain_spread  # the noise between runs of the same script
    if sides["raw"]:
        raw = sides["raw"]
        summary["raw_ratio"] = ratio_spread([r.tokens_per_second for r in z], [r.tokens_per_second for r in raw])
    if sides["plain-no-deepspeed"]:
        summary["no_deepspeed_ratio"] = ratio_spread(
            [r.tokens_per_second for r in z], [r.tokens_per_second for r in sides["plain-no-deepspeed"]]
        )
    summary["tokens_counted"] = all(r.tokens_counted for runs in sides.values() for r in runs)
    if sides["zerokit-no-preemption"]:
        off = sides["zerokit-no-preemption"]
        summary["preemption_cost"] = ratio_spread(
            [r.samples_per_second for r in z], [r.samples_per_second for r in off]
        )
    first = next((dict(r.startup_phases) for r in results if r.startup_phases and r.variant != "jit"), {})
    if "launch preflight" in first:
        summary["first_preflight_s"] = first["launch preflight"]
    for variant in variants:
        if sides[variant]:
            summary[variant]["mfu"] = run_mfu(sides[variant][0], summary[variant]["median_tokens_per_s"], peak)
    return summary


def checkpoint_summary(results: list[RunResult]) -> dict | None:
    """What a checkpoint costs the run, written sync and in the background (train --checkpoint-write), side by
    side: {"ranks", "sync", "background", "memory"}, each write's figures (checkpoint_write_summary; memory:
    memory_copy_summary, the copies in host memory between the background saves) or None."""
    runs = {r.variant: r for r in results if r.group == "checkpoint" and r.save_seconds}
    if not runs:
        return None
    ranks = next(iter(runs.values())).world_size
    writes = {write: checkpoint_write_summary(runs.get(write)) for write in ("sync", "background")}
    return {"ranks": ranks, **writes, "memory": memory_copy_summary(runs.get("memory"))}


def memory_copy_summary(run: RunResult | None) -> dict | None:
    """The memory checkpoints' figures (train --memory-checkpoints 1, medians of the copies): the stall a copy puts
    on training (in seconds; in steps of the run's pace, which holds the copies), the copy of this node's share
    (the host memory it holds, twice with a peer's), its time to sealed, the swap with the neighbour nodes (None on
    one node), and the steps' pace."""
    copies = [f for f in (run.checkpoint_saves if run else []) if f.get("write") == "memory"]
    if run is None or not copies:
        return None
    stall = statistics.median(f["stall_seconds"] for f in copies)
    swaps = [f["peer_seconds"] for f in copies if f.get("peer_seconds") is not None]
    sizes = [f["bytes"] for f in copies if f.get("bytes")]
    return {
        "copies": len(copies),
        "stall_s": stall,
        "stall_steps": stall * run.steps_per_second,
        "write_s": statistics.median(f["write_seconds"] for f in copies if f.get("write_seconds") is not None),
        "node_copy_mib": statistics.median(sizes) / 2**20 if sizes else None,
        "peer_s": statistics.median(swaps) if swaps else None,
        "steps_per_s": run.steps_per_second,
    }


def checkpoint_write_summary(run: RunResult | None) -> dict | None:
    """One write's figures: the stall a save puts on training (its median, in seconds and in median steps), the
    wait for the save before it, the write's time (from the save's start to the checkpoint published; a sync save's
    is its stall) and speed, the checkpoint's size, and the steps' pace (a background write shares the machine)."""
    if run is None:
        return None
    stall = statistics.median(run.save_seconds)
    figures = run.checkpoint_saves
    writes = [f["write_seconds"] for f in figures if f.get("write_seconds")]
    write = statistics.median(writes) if writes else stall
    summary = {
        "saves": len(run.save_seconds),
        "stall_s": stall,
        "step_s": 1 / run.steps_per_second,
        "stall_steps": stall * run.steps_per_second,
        "wait_s": statistics.median([f.get("wait_seconds", 0.0) for f in figures]) if figures else 0.0,
        "write_s": write,
        "steps_per_s": run.steps_per_second,
    }
    if run.checkpoint_bytes:
        summary |= {
            "checkpoint_mib": run.checkpoint_bytes / 2**20,
            "write_mib_per_s": run.checkpoint_bytes / 2**20 / write,
        }
    return summary


def config_rows(results: list[RunResult], main_config: str, peak: float | None = None) -> list[dict]:
    """The same job under each DeepSpeed config (--config's row is the scaling run of the same ranks)."""
    others = [r for r in results if r.group == "configs"]
    if not others:
        return []
    main = next(
        (r for r in results if r.group == "scaling" and r.nodes == 1 and r.world_size == others[0].world_size), None
    )
    rows = []
    for label, r in ([(main_config, main)] if main else []) + [(r.variant, r) for r in others]:
        rows.append(
            {
                "config": label,
                "ranks": r.world_size,
                "samples_per_s": r.samples_per_second,
                "tokens_per_s": r.tokens_per_second,
                "peak_memory_per_rank_mib": [b / MIB for b in r.peak_memory_bytes],
                "memory_kind": r.memory_kind,
                "time_to_first_step_s": r.time_to_first_step,
                "eval_loss": r.evals,
                "mfu": run_mfu(r, r.tokens_per_second, peak),
            }
        )
    return rows


def speed_rows(results: list[RunResult], peak: float | None = None) -> list[dict]:
    """The speed table: the eager run (the scaling run of the speed runs' ranks), each switch alone, all together;
    each with its ratio to eager and its last eval loss beside eager's (a switch that moves it is a bug)."""
    switched = [r for r in results if r.group == "speed"]
    eager = next(
        (
            r
            for r in results
            if r.group == "scaling" and r.nodes == 1 and switched and r.world_size == switched[0].world_size
        ),
        None,
    )
    if eager is None:
        return []
    return [
        {
            "switch": label,
            "ranks": r.world_size,
            "tokens_per_s": r.tokens_per_second,
            "samples_per_step": r.samples_per_second / r.steps_per_second / r.world_size if r.steps_per_second else 0,
            "over_eager": r.tokens_per_second / eager.tokens_per_second,
            "mfu": run_mfu(r, r.tokens_per_second, peak),
            "peak_memory_mib": max(r.peak_memory_bytes) / MIB,
            "memory_kind": r.memory_kind,
            "step_p50_s": r.step_quantiles[0] if r.step_quantiles else None,
            "step_p90_s": r.step_quantiles[1] if r.step_quantiles else None,
            "step_max_s": r.step_quantiles[2] if r.step_quantiles else None,
            "last_loss": r.last_loss,
        }
        for label, r in [("eager", eager), *((r.variant, r) for r in switched)]
    ]


def data_summary(results: list[RunResult], prepare_seconds: dict[int, float]) -> dict | None:
    """Time to first step from raw text and from prepared blocks, at each corpus scale; the ratios."""
    runs: dict[str, list[RunResult]] = {}
    for r in results:
        if r.group == "data":
            runs.setdefault(r.variant, []).append(r)
    if not runs:
        return None
    ttfs = {name: statistics.median(r.time_to_first_step for r in rs) for name, rs in runs.items()}
    scales = sorted({int(name.split("-")[1].rstrip("x")) for name in runs})
    low, high = scales[0], scales[-1]
    summary = {
        "ranks": next(iter(runs.values()))[0].world_size,
        "rounds": max(len(rs) for rs in runs.values()),
        "scales": scales,
        "time_to_first_step_s": ttfs,  # medians over the rounds
        "all_time_to_first_step_s": {name: [r.time_to_first_step for r in rs] for name, rs in runs.items()},
        "phases": {name: median_phases(rs) for name, rs in runs.items()},
        "prepare_seconds": {str(k): v for k, v in prepare_seconds.items()},
    }
    for kind in ("raw", "prepared"):
        if f"{kind}-{low}x" in ttfs and f"{kind}-{high}x" in ttfs:
            summary[f"{kind}_{high}x_over_{low}x"] = ttfs[f"{kind}-{high}x"] / ttfs[f"{kind}-{low}x"]
    return summary


def machine() -> dict:
    import deepspeed
    import torch
    import transformers

    from zerokit import __version__

    cpu = next(
        (
            line.split(":", 1)[1].strip()
            for line in Path("/proc/cpuinfo").read_text().splitlines()
            if "model name" in line
        ),
        platform.processor(),
    )
    gpus = [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())]
    return {
        "host": socket.gethostname(),
        "cpu": cpu,
        "cpu_cores": os.cpu_count(),
        "gpus": gpus,
        "torch": torch.__version__,
        "deepspeed": deepspeed.__version__,
        "transformers": transformers.__version__,
        "zerokit": __version__,
        "date": time.strftime("%Y-%m-%d %H:%M %Z"),
    }


def device_peak(cfg: BenchConfig, gpus: list[str]) -> float | None:
    """Peak TFLOPS per device at the run's precision for MFU: --peak-tflops, else the table's for the GPU (bench's
    parse refused a GPU the table lacks); None on CPU."""
    if cfg.peak_tflops:
        return cfg.peak_tflops
    return peak_tflops(gpus[0], cfg.precision) if gpus else None


def write_all(cfg: BenchConfig, results: list[RunResult], prepare_seconds: dict[int, float] | None = None) -> None:
    """results.json, scaling.png and report.md of the runs so far: bench writes them after every run, so they must
    hold any prefix of its plan (a group half run, a row not run yet)."""
    figures = collect(cfg, results, prepare_seconds or {}, machine())
    (cfg.output / "results.json").write_text(json.dumps(figures, indent=2) + "\n")
    plot_scaling(figures["scaling"], cfg.output / "scaling.png")
    (cfg.output / "report.md").write_text(markdown(figures, cfg))


def collect(cfg: BenchConfig, results: list[RunResult], prepare_seconds: dict[int, float], host: dict) -> dict:
    """Every figure of the report, from the runs so far on the machine host."""
    peak = device_peak(cfg, host["gpus"])
    return {
        "machine": host,
        "settings": {
            "config": cfg.config.name,
            "steps": cfg.steps,
            "warmup_steps": cfg.warmup_steps,
            "batch_size_per_rank": cfg.batch_size,
            "model": cfg.model or "embedded default (GPT-2, 2 layers x 128)",
            "dataset": cfg.dataset or "embedded corpus",
            "train_args": list(cfg.train_args),
            "peak_tflops_per_device": peak,
            "precision": cfg.precision,
            "preset": cfg.preset,
        },
        "scaling": scaling_rows(results),
        "configs": config_rows(results, config_label(str(cfg.config)), peak),
        "speed": speed_rows(results, peak),
        "startup": startup_summary(results),
        "checkpoint": checkpoint_summary(results),
        "data": data_summary(results, prepare_seconds),
        "overhead": overhead_summary(results, peak, cfg.overhead_switches),
        "runs": [r.as_dict() for r in results],
    }


def plot_scaling(rows: list[dict], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib import pyplot as plt

    labels = [f"{r['ranks']} ({r['nodes']}n)" for r in rows]
    fig, (throughput, efficiency) = plt.subplots(1, 2, figsize=(10, 4))
    throughput.plot(labels, [r["samples_per_s"] for r in rows], marker="o", label="measured")
    ideal = [rows[0]["samples_per_s"] / rows[0]["ranks"] * r["ranks"] for r in rows]
    throughput.plot(labels, ideal, linestyle="--", color="gray", label="linear")
    throughput.set(title="Throughput", xlabel="ranks (nodes)", ylabel="samples/s")
    throughput.legend()
    efficiency.plot(labels, [100 * r["efficiency"] for r in rows], marker="o")
    efficiency.set(title="Scaling efficiency", xlabel="ranks (nodes)", ylabel="% of linear", ylim=(0, 110))
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def markdown(figures: dict, cfg: BenchConfig) -> str:
    m, s = figures["machine"], figures["settings"]
    lines = [
        "# zerokit bench",
        "",
        f"Machine: {m['host']}, {m['cpu']} ({m['cpu_cores']} cores), GPUs: {', '.join(m['gpus']) or 'none'}; "
        f"torch {m['torch']}, DeepSpeed {m['deepspeed']}, transformers {m['transformers']}, zerokit {m['zerokit']}; "
        f"{m['date']}.",
        f"Job: {s['model']} on {s['dataset']}, DeepSpeed config {s['config']}, {s['steps']} steps of "
        f"{s['batch_size_per_rank']} samples per rank; throughput leaves out the first {s['warmup_steps']} steps "
        "after the first, and the evaluations.",
        f"Precision {s['precision']}"
        + (
            f"; MFU = tokens/s x (6N + 12·L·d·S) FLOPs per token / (devices x {s['peak_tflops_per_device']:g} "
            f"dense {s['precision']} TFLOPS), zerokit.bench.flops."
            if s["peak_tflops_per_device"]
            else "; no MFU (no GPU peak: `--peak-tflops`)."
        ),
        "",
        "## Scaling",
        "",
        "| ranks | nodes | time to first step (s) | steps/s | samples/s | tokens/s | peak memory/rank (MiB) "
        "| eval loss (step: loss) | efficiency |",
        "|---:|---:|---:|---:|---:|---:|---:|---|---:|",
    ]
    for r in figures["scaling"]:
        losses = ", ".join(f"{step}: {loss:.3f}" for step, loss in r["eval_loss"])
        lines.append(
            f"| {r['ranks']} | {r['nodes']} | {r['time_to_first_step_s']:.1f} | {r['steps_per_s']:.2f} "
            f"| {r['samples_per_s']:.1f} | {r['tokens_per_s']:.0f} | {r['peak_memory_per_rank_mib']:.0f} "
            f"| {losses} | {100 * r['efficiency']:.0f}% |"
        )
    kind = figures["scaling"][0]["memory_kind"] if figures["scaling"] else "cpu-rss"
    lines += [
        "",
        "Efficiency: samples/s per rank against the first row's. Peak memory: "
        + ("torch's peak allocated GPU memory." if kind == "gpu-allocated" else "the rank process's peak RSS (CPU)."),
        "",
        "![scaling](scaling.png)",
        "",
        "## Start-up: prebuilt ops vs JIT",
        "",
    ]
    startup = figures["startup"]
    if startup:
        lines += [
            f"Time to first step, {startup['ranks']} ranks on one node: **{startup['prebuilt_s']:.1f} s** with this "
            f"environment's prebuilt ops, **{startup['jit_s']:.1f} s** with the same DeepSpeed built without ops "
            f"(JIT, fresh extensions cache; it compiled {', '.join(startup['compiled_ops'])}): "
            f"{startup['saved_s']:.1f} s saved on every new node "
            f"(JIT/prebuilt = {startup['jit_over_prebuilt']:.2f}). The JIT run skips launch's preflight checks "
            "(they refuse ops that are not prebuilt), which only flatters it.",
        ]
    else:
        lines.append("Not run: pass `--jit-python` (an environment whose DeepSpeed has no prebuilt ops; `make bench`).")
    lines += configs_section(figures["configs"])
    lines += speed_section(figures["speed"], cfg.speed)
    lines += checkpoint_section(figures["checkpoint"])
    lines += data_section(figures["data"])
    lines += overhead_section(figures["overhead"])
    return "\n".join(lines) + "\n"


def spread(figure: dict) -> str:
    return f"{figure['pair_min']:.3f}-{figure['pair_max']:.3f}"


def configs_section(rows: list[dict]) -> list[str]:
    lines = ["", "## DeepSpeed configs: the same job under each", ""]
    if not rows:
        return [*lines, "Not run (`--skip configs`, or no 1-node run)."]
    gpu = rows[0]["memory_kind"] == "gpu-allocated"
    lines += [
        f"{rows[0]['ranks']} ranks on one node, one run each (`none`: the Trainer without DeepSpeed, DDP).",
        "",
        "| config | samples/s | tokens/s | peak memory per rank (MiB) | time to first step (s) | MFU |",
        "|---|---:|---:|---|---:|---:|",
    ]
    for r in rows:
        memory = " / ".join(f"{m:.0f}" for m in r["peak_memory_per_rank_mib"])
        mfu_text = percent(r["mfu"]) if r["mfu"] is not None else "-"
        lines.append(
            f"| {r['config']} | {r['samples_per_s']:.1f} | {r['tokens_per_s']:.0f} | {memory} "
            f"| {r['time_to_first_step_s']:.1f} | {mfu_text} |"
        )
    if any(r["config"].startswith("zero3") and r["ranks"] == 1 for r in rows):
        lines += ["", "ZeRO-3 on one rank partitions nothing: its row measures the cost of its hooks only."]
    lines += [
        "",
        "Peak memory: "
        + (
            "torch's peak allocated GPU memory"
            if gpu
            else "each rank's peak RSS (on CPU, ZeRO's partitioning of "
            "optimizer state is small next to torch's and the libraries' own memory in this tiny model)"
        )
        + ("" if gpu else "; MFU needs a GPU (or `--peak-tflops`)")
        + ".",
    ]
    return lines


def speed_section(rows: list[dict], switches: tuple[tuple[str, tuple[str, ...]], ...]) -> list[str]:
    together = ", then all together" if len(switches) > 1 else ""
    lines = ["", f"## Speed switches: eager, each switch alone{together}", ""]
    if not rows:
        return [*lines, "Not run (with `--preset` only; `--skip speed`)."]
    flags = {name: " ".join(words) for name, words in switches}
    flags["all"] = " ".join(flags.values())
    lines += [
        f"{rows[0]['ranks']} rank(s), one run each; samples/step/rank: the micro-batch times the gradient "
        "accumulation; steps: p50/p90/max of the timed steps; loss: the last eval loss (a switch may move it by "
        "rounding only, but a run of more samples a step, as `micro-batch` and an `all` with it, trains on more text).",
        "",
        "| switch | train flags | samples/step/rank | tokens/s | / eager | MFU | peak memory (MiB) "
        "| step p50 / p90 / max (ms) | loss |",
        "|---|---|---:|---:|---:|---:|---:|---|---:|",
    ]
    for r in rows:
        steps = (
            "/".join(f"{1000 * r[key]:.0f}" for key in ("step_p50_s", "step_p90_s", "step_max_s"))
            if r["step_p50_s"] is not None
            else "-"
        )
        loss = f"{r['last_loss']:.4f}" if r["last_loss"] is not None else "-"
        batch = f"{r['samples_per_step']:.0f}" if r["samples_per_step"] else "-"
        lines.append(
            f"| {r['switch']} | `{flags.get(r['switch'], '')}` | {batch} | {r['tokens_per_s']:.0f} "
            f"| {r['over_eager']:.2f} | {percent(r['mfu']) if r['mfu'] is not None else '-'} "
            f"| {r['peak_memory_mib']:.0f} | {steps} | {loss} |"
        )
    return lines


def checkpoint_section(checkpoint: dict | None) -> list[str]:
    lines = ["", "## Checkpoint cost: sync and background writes", ""]
    if not checkpoint:
        return [*lines, "Not run (`--skip checkpoint`, or more than one node)."]
    lines += [
        f"The main job on {checkpoint['ranks']} rank(s), a checkpoint every third of the steps, written by `train "
        "--checkpoint-write sync` and `background` (medians of the saves). The stall is what a save holds training "
        "for (a background save: the wait for the save before it, the copy to host memory and the small files); "
        "the write runs from the save's start to the checkpoint published.",
        "",
        "| write | stall (s) | stall (steps) | wait (s) | write (s) | size (MiB) | write MiB/s | step (s) | steps/s |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for write in ("sync", "background"):
        row = checkpoint.get(write)
        if not row:
            lines.append(f"| {write} | not run | | | | | | | |")
            continue
        size = f"{row['checkpoint_mib']:.0f} | {row['write_mib_per_s']:.0f}" if "checkpoint_mib" in row else "- | -"
        lines.append(
            f"| {write} | {row['stall_s']:.2f} | **{row['stall_steps']:.2f}** | {row['wait_s']:.2f} | "
            f"{row['write_s']:.2f} | {size} | {row['step_s']:.2f} | {row['steps_per_s']:.3f} |"
        )
    memory = checkpoint.get("memory")
    if memory:
        swap = f"{memory['peer_s']:.2f} s" if memory["peer_s"] is not None else "none (one node: no ring)"
        held = f"{memory['node_copy_mib']:.0f} MiB" if memory["node_copy_mib"] else "-"
        lines += ["", f"With `--memory-checkpoints 1` beside the background saves: {memory['copies']} copies into "
                  f"host memory, each stalling training {memory['stall_s']:.3f} s (**{memory['stall_steps']:.2f}** "
                  f"steps), sealed {memory['write_s']:.2f} s after it began; this node's copy {held} (held twice "
                  f"with a peer's); the swap with the neighbour nodes {swap}; "
                  f"steps/s {memory['steps_per_s']:.3f}."]  # fmt: skip
    sync, background = checkpoint.get("sync"), checkpoint.get("background")
    for write, row in (("sync", sync), ("background", background)):
        if row and row["stall_steps"] > 0:
            stall = row["stall_steps"]
            lines += ["", f"Written {write}, saving every K steps adds {stall:.2f}/K steps of stall to the training "
                      f"time, 10% at `--save_steps {max(1, math.ceil(10 * stall))}`."]  # fmt: skip
    if sync and background:
        pace = background["steps_per_s"] / sync["steps_per_s"]
        lines += ["", f"The background run's steps went at {pace:.2f} of the sync run's pace: its write shares the "
                  "machine (the cores, memory bandwidth and the disk's queue) with the steps it overlaps, which a "
                  "stall does not show; on CPU ranks compare the two runs' steps/s too."]  # fmt: skip
    return lines


def data_section(data: dict | None) -> list[str]:
    lines = ["", "## Start-up with prepared data: raw text vs `prepare tokenize`", ""]
    if not data:
        return [*lines, "Not run (`--skip data`, or a job with its own --model/--dataset)."]
    ttfs, low, high = data["time_to_first_step_s"], data["scales"][0], data["scales"][-1]
    lines += [
        f"Time to first step (s), {data['ranks']} ranks, the embedded corpus at {low}x and {high}x its size "
        f"(medians of {data['rounds']} rounds; a fresh datasets cache each run, so raw text is tokenized by the "
        "ranks):",
        "",
        f"| data | {low}x | {high}x | {high}x / {low}x |",
        "|---|---:|---:|---:|",
    ]
    for kind in ("raw", "prepared"):  # a cell whose run has not come yet (the report of a bench midway) is "-"
        ratio = data.get(f"{kind}_{high}x_over_{low}x")
        low_s, high_s = ttfs.get(f"{kind}-{low}x"), ttfs.get(f"{kind}-{high}x")
        lines.append(
            f"| {'raw text' if kind == 'raw' else 'prepared blocks'} | {'-' if low_s is None else f'{low_s:.1f}'} "
            f"| {'-' if high_s is None else f'{high_s:.1f}'} | {'-' if ratio is None else f'**{ratio:.2f}**'} |"
        )
    made = ", ".join(f"{scale}x {seconds:.1f} s" for scale, seconds in data["prepare_seconds"].items())
    if made:
        lines += ["", f"`prepare tokenize` itself (once, before the job): {made}."]
    return lines


OVERHEAD_LABELS = {
    "zerokit": "zerokit train",
    "plain": "plain HF Trainer + DeepSpeed",
    "plain-no-deepspeed": "plain HF Trainer, no DeepSpeed",
    "raw": "raw DeepSpeed loop",
    "zerokit-no-preemption": "zerokit train, no preemption callback",
}


def overhead_section(overhead: dict | None) -> list[str]:
    lines = ["", "## Overhead: zerokit `train` vs a plain HF Trainer script and a raw DeepSpeed loop", ""]
    if not overhead:
        return [*lines, "Not run (`--skip overhead`, or no plain script for this job)."]
    t, s = overhead["throughput_spread"], overhead["startup_spread"]
    sides = [v for v in OVERHEAD_VARIANTS if v in overhead]
    gpu = any(overhead[v].get("mfu") is not None for v in sides)
    lines += [
        f"{overhead['ranks']} ranks, {overhead['repeats']} rounds ({', '.join(OVERHEAD_LABELS[v] for v in sides)}, "
        "in turn); medians, and in brackets the spread: the lowest and highest ratio of a round's pair. "
        + (f"Every side ran with {', '.join(overhead['switches'])}. " if overhead.get("switches") else "Eager. ")
        + (
            "Tokens are those each step trained on, as counted in its batches."
            if overhead.get("tokens_counted")
            else "Tokens: full batches assumed (on a GPU the Trainer's count would sync the device every batch)."
        ),
        "",
        "| | samples/s | tokens/s | step p50 / p90 / max (ms) | time to first step (s) |" + (" MFU |" if gpu else ""),
        "|---|---:|---:|---|---:|" + ("---:|" if gpu else ""),
    ]
    for variant in sides:
        side_ = overhead[variant]
        mfu_text = f" {percent(side_['mfu'])} |" if gpu and side_.get("mfu") is not None else (" - |" if gpu else "")
        steps = side_.get("step_quantiles_s")
        steps_text = "/".join(f"{1000 * q:.0f}" for q in steps) if steps else "-"
        lines.append(
            f"| {OVERHEAD_LABELS[variant]} | {side_['median_samples_per_s']:.1f} | {side_['median_tokens_per_s']:.0f} "
            f"| {steps_text} | {side_['median_time_to_first_step_s']:.2f} |" + mfu_text
        )
    lines.append(
        f"| **ratio zerokit / plain** | **{t['ratio']:.3f}** ({spread(t)}) | | | **{s['ratio']:.3f}** ({spread(s)}) |"
        + (" |" if gpu else "")
    )
    for key, label in (("raw_ratio", "raw DeepSpeed loop"), ("no_deepspeed_ratio", "plain HF, no DeepSpeed")):
        if key in overhead:
            r = overhead[key]
            row = f"| **ratio zerokit / {label}** | | **{r['ratio']:.3f}** ({spread(r)}) | | |"
            lines.append(row + (" |" if gpu else ""))
    lines += [
        "",
        f"Run-to-run noise: the plain script's own fastest/slowest samples/s is "
        f"{overhead['plain_throughput_max_over_min']:.3f}.",
    ]
    if overhead["repeats"] < 3:
        lines.append(f"Only {overhead['repeats']} round(s): too few for a spread that means anything (`--repeats 3`).")
    cost = overhead.get("preemption_cost")
    if cost:
        off = overhead["zerokit-no-preemption"]
        lines += [
            "",
            f"Preemption callback's cost: samples/s with it / without it = **{cost['ratio']:.3f}** ({spread(cost)}); "
            f"without it {off['median_samples_per_s']:.1f} samples/s (median).",
        ]
    lines += startup_phase_table(overhead)
    return lines


def startup_phase_table(overhead: dict) -> list[str]:
    """Where the seconds to the first step go: each phase's median, zerokit's and the plain script's."""
    z, p = dict(overhead["zerokit"]["startup_phases"]), dict(overhead["plain"]["startup_phases"])
    if not z:
        return []
    lines = [
        "",
        "Start-up, phase by phase (medians, s; each phase is named by the moment that ends it: `launch "
        "started`/`started`, a process started; `launch preflight`, launch's node checks done; `imports` to "
        "`trainer`, train's steps; `train_begin`, DeepSpeed's engine built; `first_step`, its end):",
        "",
        "| phase | zerokit | plain |",
        "|---|---:|---:|",
    ]
    lines += [
        f"| {name} | {seconds:.2f} | {p[name]:.2f} |" if name in p else f"| {name} | {seconds:.2f} | |"
        for name, seconds in z.items()
    ]
    lines.append(f"| **total** | **{sum(z.values()):.2f}** | **{sum(p.values()):.2f}** |")
    cold = overhead.get("first_preflight_s")
    if cold is not None:
        lines += [
            "",
            f"`launch preflight` in bench's first run, on a fresh cache: {cold:.2f} s (it loads every DeepSpeed op "
            "once per install and node, then keeps the verdict; zerokit.launch.preflight).",
        ]
    return lines


def percent(fraction: float) -> str:
    """MFU as a percentage with two significant digits: a tiny model's 0.0071% is not "0.0%"."""
    return f"{100 * fraction:.2g}%"
