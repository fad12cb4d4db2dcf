"""The figures derived from the runs, and the three files: results.json, report.md, scaling.png."""

from __future__ import annotations

import json
import os
import platform
import socket
import statistics
import time
from pathlib import Path

from zerokit.bench.plan import BenchConfig
from zerokit.bench.runner import RunResult

MIB = 1024 * 1024


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


def overhead_summary(results: list[RunResult]) -> dict | None:
    """Medians of zerokit's train and the plain script, run alternately; ratios zerokit / plain."""
    sides = {v: [r for r in results if r.group == "overhead" and r.variant == v] for v in ("zerokit", "plain")}
    if not sides["zerokit"] or not sides["plain"]:
        return None
    summary: dict = {"ranks": sides["zerokit"][0].world_size, "repeats": len(sides["plain"])}
    for variant, runs in sides.items():
        summary[variant] = {
            "samples_per_s": [r.samples_per_second for r in runs],
            "time_to_first_step_s": [r.time_to_first_step for r in runs],
            "median_samples_per_s": statistics.median(r.samples_per_second for r in runs),
            "median_time_to_first_step_s": statistics.median(r.time_to_first_step for r in runs),
        }
    summary["throughput_ratio"] = summary["zerokit"]["median_samples_per_s"] / summary["plain"]["median_samples_per_s"]
    summary["startup_ratio"] = (
        summary["zerokit"]["median_time_to_first_step_s"] / summary["plain"]["median_time_to_first_step_s"]
    )
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


def write_all(cfg: BenchConfig, results: list[RunResult]) -> None:
    figures = {
        "machine": machine(),
        "settings": {
            "config": cfg.config.name,
            "steps": cfg.steps,
            "warmup_steps": cfg.warmup_steps,
            "batch_size_per_rank": cfg.batch_size,
            "model": cfg.model or "embedded default (GPT-2, 2 layers x 128)",
            "dataset": cfg.dataset or "embedded corpus",
            "train_args": list(cfg.train_args),
        },
        "scaling": scaling_rows(results),
        "startup": startup_summary(results),
        "overhead": overhead_summary(results),
        "runs": [r.as_dict() for r in results],
    }
    (cfg.output / "results.json").write_text(json.dumps(figures, indent=2) + "\n")
    plot_scaling(figures["scaling"], cfg.output / "scaling.png")
    (cfg.output / "report.md").write_text(markdown(figures, cfg))


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
    lines += ["", "## Overhead: zerokit `train` vs a plain HF Trainer script", ""]
    overhead = figures["overhead"]
    if overhead:
        z, p = overhead["zerokit"], overhead["plain"]
        lines += [
            f"{overhead['ranks']} ranks, {overhead['repeats']} runs of each, alternating; medians.",
            "",
            "| | samples/s | time to first step (s) |",
            "|---|---:|---:|",
            f"| zerokit train | {z['median_samples_per_s']:.1f} | {z['median_time_to_first_step_s']:.1f} |",
            f"| plain script (tests/bench) | {p['median_samples_per_s']:.1f} "
            f"| {p['median_time_to_first_step_s']:.1f} |",
            f"| **ratio zerokit / plain** | **{overhead['throughput_ratio']:.3f}** "
            f"| **{overhead['startup_ratio']:.3f}** |",
            "",
            "zerokit's start-up includes launch's preflight checks (doctor: ops, /dev/shm, interface, caches).",
        ]
    else:
        lines.append("Not run (`--skip overhead`, or no plain script for this job).")
    return "\n".join(lines) + "\n"
