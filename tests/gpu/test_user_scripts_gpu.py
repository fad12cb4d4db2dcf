"""Users' scripts, unmodified, under `launch` on every GPU of this node: transformers' run_clm-style script with
ZeRO-3 (and DDP), and an accelerate loop with a DeepSpeedPlugin (ZeRO-2, ZeRO-3): one job (each rank reports
the world size), loss falling; the bootstrap's nccl path (set_device, then the process group). Run it in a
CUDA environment: `ZEROKIT_STACK=cuda13 pytest -m gpu`. Runs on every GPU torch sees, one or more: on one GPU it
is a world of one, still the script's own nccl path."""

from __future__ import annotations

import subprocess
import sys

import pytest

from tests.conftest import REPO
from tests.e2e.test_user_scripts import LOSS, clm_argv, inputs  # noqa: F401 (a fixture)

torch = pytest.importorskip("torch")

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs an NVIDIA GPU: torch.cuda.is_available() is False"),
]


@pytest.mark.parametrize("extra", [["--deepspeed", str(REPO / "configs/zero3.json")], []], ids=["deepspeed", "ddp"])
def test_run_clm_trains_as_one_job_on_the_gpus(inputs, zk_env, tmp_path, extra):  # noqa: F811
    gpus = torch.cuda.device_count()
    argv = ["launch", "--nproc-per-node", str(gpus), "--", "python", *clm_argv(inputs, tmp_path / "out"), *extra]
    result = subprocess.run(
        [sys.executable, "-m", "zerokit", *argv], env=zk_env, cwd=tmp_path, capture_output=True, text=True, timeout=900
    )
    log = result.stdout + result.stderr
    assert result.returncode == 0, log[-4000:]
    assert all(f"run_clm: rank {r} of world size {gpus}" in log for r in range(gpus))  # one pipe: lines interleave
    losses = [float(x) for x in LOSS.findall(result.stdout)]
    assert len(losses) >= 4 and losses[-1] < losses[0], losses


@pytest.mark.parametrize("stage", ["2", "3"])
def test_an_accelerate_loop_trains_with_deepspeed_on_the_gpus(zk_env, tmp_path, stage):
    """A user's Accelerator loop with a DeepSpeedPlugin: accelerate's own GPU path (nccl), DeepSpeed used."""
    gpus = torch.cuda.device_count()
    script = REPO / "tests" / "users" / "accelerate_loop.py"
    argv = ["launch", "--nproc-per-node", str(gpus), "--", "python", str(script), "--zero-stage", stage]
    result = subprocess.run(
        [sys.executable, "-m", "zerokit", *argv], env=zk_env, cwd=tmp_path, capture_output=True, text=True, timeout=900
    )
    log = result.stdout + result.stderr
    assert result.returncode == 0, log[-4000:]
    assert all(f"accelerate_loop: rank {r} of world size {gpus}" in log for r in range(gpus))
    assert "accelerate_loop: deepspeed True" in result.stdout.splitlines()
    losses = [float(x) for x in LOSS.findall(result.stdout)]
    assert len(losses) >= 4 and losses[-1] < 0.9 * losses[0], losses
