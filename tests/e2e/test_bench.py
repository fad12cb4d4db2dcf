"""`bench` on its smallest setting, to keep it working: 1 and 2 ranks, no DeepSpeed, a checkpoint's cost, one overhead
round (zerokit, the plain HF script with and without DeepSpeed, the raw DeepSpeed loop), no JIT.

Timings are not asserted (benchmarks are not tests): only that every figure is there, the
training behind it learned, and the three files are written. The JIT start-up comparison is
left out here: it compiles DeepSpeed's ops a second time (`make bench` runs it); so are the data
group (two `prepare tokenize` runs and four trainings) and the run without the preemption callback,
whose plans and figures tests/unit/bench covers.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.conftest import run_zerokit
from tests.e2e.test_tensor_parallel import TINY_LLAMA


def test_bench_smallest_setting_writes_report_plot_and_json(tmp_path: Path, zk_env):
    out = tmp_path / "bench"
    notes = out / "notes.txt"  # the user's file in the report folder: --overwrite must keep it
    notes.parent.mkdir()
    notes.write_text("mine")
    argv = ["bench", "--output", str(out), "--overwrite", "--ranks", "1,2", "--steps", "12", "--warmup-steps", "2"]
    skips = ["--skip", "startup", "--skip", "data", "--skip", "preemption"]
    result = run_zerokit([*argv, "--eval-steps", "6", "--repeats", "1", "--configs", "none", *skips], zk_env)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "9/10" in result.stderr  # the progress bar, one tick per run

    figures = json.loads((out / "results.json").read_text())
    rows = figures["scaling"]
    assert [(r["ranks"], r["nodes"]) for r in rows] == [(1, 1), (2, 1)]
    for row in rows:
        assert row["time_to_first_step_s"] > 0 and row["samples_per_s"] > 0 and row["peak_memory_per_rank_mib"] > 50
        assert row["tokens_per_s"] == row["samples_per_s"] * 64  # the embedded job's blocks
        losses = dict(row["eval_loss"])
        assert sorted(losses) == [6, 12] and losses[12] < losses[6]  # the runs trained
    assert rows[0]["efficiency"] == 1.0
    assert [len(r["peak_memory_bytes"]) for r in figures["runs"][:2]] == [1, 2]  # one figure per rank
    overhead = figures["overhead"]
    assert overhead["ranks"] == 2 and overhead["throughput_ratio"] > 0 and overhead["startup_ratio"] > 0
    assert overhead["raw_ratio"]["ratio"] > 0 and overhead["no_deepspeed_ratio"]["ratio"] > 0
    assert overhead["tokens_counted"]  # every script counted the tokens of its steps (on CPU ranks)
    for run in figures["runs"]:  # the clock's per-step times, every script's
        p50, p90, worst = run["step_quantiles"]
        assert 0 < p50 <= p90 <= worst
    raw = next(run for run in figures["runs"] if run["variant"] == "raw")
    assert raw["evals"][-1][0] == 12 and raw["evals"][-1][1] < 10 and raw["parameters"] > 0  # it trained and evaluated
    assert figures["startup"] is None and figures["data"] is None
    checkpoint = figures["checkpoint"]  # 12 steps, a save every 4: three, each timed apart from the steps
    assert checkpoint["ranks"] == 2
    for write in ("sync", "background"):  # side by side
        row = checkpoint[write]
        assert row["saves"] == 3 and row["stall_s"] > 0 and row["write_s"] >= row["stall_s"] * 0.5
        assert row["checkpoint_mib"] > 1 and row["stall_steps"] > 0 and row["write_mib_per_s"] > 0
    memory = checkpoint["memory"]  # a copy in host memory at each of the 9 steps between the saves (not the last)
    assert memory["copies"] == 9 and memory["stall_s"] > 0 and memory["node_copy_mib"] > 1
    assert memory["peer_s"] is None  # one node: no ring
    configs = {row["config"]: row for row in figures["configs"]}
    assert sorted(configs) == ["none", "zero2"] and configs["none"]["samples_per_s"] > 0
    assert len(configs["none"]["peak_memory_per_rank_mib"]) == 2
    spread = overhead["throughput_spread"]
    assert spread["pair_min"] == spread["pair_max"] == overhead["throughput_ratio"]  # one round: one pair
    phases = dict(overhead["zerokit"]["startup_phases"])  # where zerokit's seconds to the first step go
    assert {"launch preflight", "imports", "model", "data", "train_begin", "first_step"} <= set(phases)
    ttfs = overhead["zerokit"]["median_time_to_first_step_s"]
    assert abs(sum(phases.values()) - ttfs) < 0.01  # the phases add up to the time to first step
    assert set(dict(overhead["plain"]["startup_phases"])) == {"started", "train_begin", "first_step"}

    report = (out / "report.md").read_text()
    assert "| 2 | 1 |" in report and "ratio zerokit / plain" in report and "Not run: pass `--jit-python`" in report
    assert "| raw DeepSpeed loop |" in report and "| plain HF Trainer, no DeepSpeed |" in report
    assert "| none |" in report and "| launch preflight |" in report and "| background | " in report
    assert (out / "scaling.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    # The plain script trained too: its own output, not zerokit's.
    assert (out / "runs" / "overhead-plain-1" / "output" / "model.safetensors").is_file()
    assert notes.read_text() == "mine"


def test_split_config_rows_count_their_shared_batches_and_the_whole_model(tmp_path: Path, zk_env):
    """--configs NAME+tp2 and NAME+pp2: train --tp-size 2 and --pp-size 2 on the 2 ranks (a Llama, which both
    split). The 2 ranks share each batch, so the samples per step are one rank's batch, not two; the parameters
    are the whole model's, not one rank's part."""
    out = tmp_path / "bench"
    argv = ["bench", "--output", str(out), "--ranks", "2", "--config", "zero2", "--configs", "zero2+tp2,zero1+pp2",
            "--steps", "8", "--warmup-steps", "2", "--eval-steps", "4", "--batch-size", "4"]  # fmt: skip
    groups = ("startup", "data", "checkpoint", "overhead", "preemption")
    skips = [word for group in groups for word in ("--skip", group)]
    llama = ["--model-type", "llama", "--config-overrides", TINY_LLAMA]
    result = run_zerokit([*argv, *skips, "--", *llama], zk_env)
    assert result.returncode == 0, result.stderr[-3000:]
    figures = json.loads((out / "results.json").read_text())
    assert [row["config"] for row in figures["configs"]] == ["zero2", "zero2+tp2", "zero1+pp2"]
    runs = {run["variant"]: run for run in figures["runs"]}
    data_parallel = runs["zerokit"]
    assert data_parallel["samples_per_second"] == pytest.approx(data_parallel["steps_per_second"] * 4 * 2)
    for split in (runs["zero2+tp2"], runs["zero1+pp2"]):
        assert split["parameters"] == data_parallel["parameters"] > 0
        assert split["samples_per_second"] == pytest.approx(split["steps_per_second"] * 4)
    assert "| zero2+tp2 |" in (out / "report.md").read_text() and "| zero1+pp2 |" in (out / "report.md").read_text()
