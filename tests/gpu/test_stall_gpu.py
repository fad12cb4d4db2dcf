"""launch's stall watch on GPU ranks (nccl): a rank spinning outside any collective while its peer waits in
all_reduce is named and the job ended, and the NCCL flight recorder's variables reach the ranks (their dumps,
where NCCL writes them, are copied beside the stacks). Needs 2 GPUs or more: `pytest -m gpu tests/gpu`."""

from __future__ import annotations

import sys

import pytest

from tests.conftest import run_zerokit
from tests.faults.test_stall import BOUND, SPIN_MARK, spin_line

torch = pytest.importorskip("torch")

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(torch.cuda.device_count() < 2, reason="needs 2 NVIDIA GPUs: torch sees fewer"),
]

SPINNING_ON_GPUS = f"""
import os, sys
import torch
import torch.distributed as dist

torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
dist.init_process_group("nccl")
print("flight recorder", os.environ.get("TORCH_NCCL_TRACE_BUFFER_SIZE", "unset"), flush=True)
dist.all_reduce(torch.ones(1, device="cuda"))  # one collective done: the recorder has something to dump
if dist.get_rank() == 1:
    n = 0
    while True: n += 1  {SPIN_MARK}
dist.all_reduce(torch.ones(1, device="cuda"))
torch.cuda.synchronize()
"""


def test_a_spinning_gpu_rank_is_named_and_the_recorder_is_on(tmp_path, zk_env):
    job, out, timeout = tmp_path / "job.py", tmp_path / "out", 30
    job.write_text(SPINNING_ON_GPUS)
    args = ["launch", "--stall-timeout", str(timeout), "--nproc-per-node", "2", "--no-preflight", "--"]
    result = run_zerokit([*args, sys.executable, str(job), "--output_dir", str(out)], zk_env, timeout=timeout + BOUND)
    assert result.returncode == 124, result.stderr[-3000:]
    assert f"is stuck at {job}:{spin_line(job)} outside any collective" in result.stderr.splitlines()[-1]
    assert "flight recorder unset" not in result.stdout  # launch turned it on for every rank
    assert list(out.glob("zerokit-stall-*.txt"))
