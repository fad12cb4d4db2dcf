"""`launch --check-only` on this machine's GPUs: NCCL, nccl-tests' sweep and figures, the GPU facts.

Skipped, with the reason, where torch sees no GPU; run it with `pytest -m gpu` in a CUDA environment.
"""

from __future__ import annotations

import json
import shutil

import pytest

from tests.conftest import run_zerokit
from zerokit.healthcheck.sweep import GPU_SIZES

torch = pytest.importorskip("torch")

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs an NVIDIA GPU: torch.cuda.is_available() is False"),
]


def test_check_on_the_gpus_runs_nccl_with_all_reduce_perf_figures(zk_env):
    ranks = min(2, torch.cuda.device_count())
    argv = ["launch", "--nproc-per-node", str(ranks), "--no-preflight", "--check-only", "--json"]
    result = run_zerokit(argv, zk_env, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    report = json.loads(result.stdout)
    assert (report["verdict"], report["backend"], report["ranks"]) == ("pass", "nccl", ranks)
    sweep = [row for row in report["collectives"] if row["op"] == "all_reduce"]
    assert [row["size"] for row in sweep] == list(GPU_SIZES)
    assert all(row["algbw_gbps"] > 0 for row in sweep)
    bus = 2 * (ranks - 1) / ranks
    assert all(row["busbw_gbps"] == pytest.approx(row["algbw_gbps"] * bus, abs=2e-4) for row in sweep)
    facts = report["nodes"][0]["facts"]
    assert facts["gpu_count"] == torch.cuda.device_count()
    assert facts["gpu_model"] == torch.cuda.get_device_name(0)
    assert facts["nccl"] != "-"
    if shutil.which("nvidia-smi"):
        assert facts["driver"] != "-" and len(facts["sm_clocks_mhz"]) == torch.cuda.device_count()
