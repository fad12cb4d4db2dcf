"""`bench` on one GPU, smallest setting: the figures come from the GPU (allocated memory, bf16/fp16 run).

Skipped, with the reason, where torch sees no GPU; run it with `pytest -m gpu` in a CUDA environment.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.conftest import run_zerokit

torch = pytest.importorskip("torch")

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs an NVIDIA GPU: torch.cuda.is_available() is False"),
]


def test_bench_on_one_gpu_reports_gpu_memory_the_overhead_ratio_and_mfu(tmp_path: Path, zk_env):
    out = tmp_path / "bench"
    argv = ["bench", "--output", str(out), "--ranks", "1", "--steps", "12", "--warmup-steps", "2", "--eval-steps", "6"]
    skips = ["--skip", "startup", "--skip", "data", "--skip", "preemption"]
    result = run_zerokit([*argv, "--repeats", "1", "--configs", "zero3", *skips], zk_env)
    assert result.returncode == 0, result.stderr[-3000:]
    figures = json.loads((out / "results.json").read_text())
    assert figures["machine"]["gpus"], figures["machine"]
    assert {r["memory_kind"] for r in figures["runs"]} == {"gpu-allocated"}
    total = torch.cuda.get_device_properties(0).total_memory
    assert all(0 < r["peak_memory_bytes"][0] < total for r in figures["runs"])
    assert "--bf16" in figures["settings"]["train_args"] or not torch.cuda.is_bf16_supported()  # both scripts
    assert figures["overhead"]["throughput_ratio"] > 0
    # Tokens/s and MFU of every script, against the table's peak for this GPU at bf16 (bench refuses a GPU the
    # table lacks unless --peak-tflops is given: no MFU is dropped without a word).
    overhead, peak = figures["overhead"], figures["settings"]["peak_tflops_per_device"]
    assert peak and figures["settings"]["precision"] in ("bf16", "fp16")
    for script in ("zerokit", "plain", "plain-no-deepspeed", "raw"):
        assert overhead[script]["median_tokens_per_s"] > 0 and 0 < overhead[script]["mfu"] < 1, script
    assert "MFU" in (out / "report.md").read_text()
    assert all(0 < row["mfu"] < 1 for row in figures["configs"])
