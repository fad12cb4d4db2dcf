"""DeepSpeed's host ops are built for the stack's CPU target (x86-64-v3), not the build machine.

The wheel `make venv` built (and the image reuses) is checked: no AVX-512 instruction in the ops
compiled with -march, and a cpu_adam step runs on an emulated Haswell (AVX2, no AVX-512) under
Debian's qemu-user. An op built with -march=native on an AVX-512 machine dies there with SIGILL.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from zerokit.image.stack import load_stack

# Compiled with DeepSpeed's cpu_arch()/simd_width() flags. deepspeed_shm_comm is not: it holds
# AVX-512 kernels behind target("avx512bw") and picks them at run time with __builtin_cpu_supports.
MARCH_OPS = {"cpu_adam": "adam", "cpu_adagrad": "adagrad", "cpu_lion": "lion", "fused_adam": "adam", "async_io": "aio"}

STEP_SCRIPT = """
import torch
from deepspeed.ops.adam import DeepSpeedCPUAdam
p = torch.nn.Parameter(torch.ones(4096))
p.grad = torch.full((4096,), 0.5)
DeepSpeedCPUAdam([p], lr=0.1).step()
print(torch.backends.cpu.get_cpu_capability(), round(float(p[0]), 4))
"""


def op_library(op: str) -> Path:
    import deepspeed

    folder = Path(deepspeed.__file__).parent / "ops" / MARCH_OPS[op]
    matches = list(folder.glob(f"{op}_op*.so"))
    assert matches, f"{op} is not prebuilt in {folder}"
    return matches[0]


@pytest.mark.skipif(shutil.which("objdump") is None, reason="needs objdump (binutils)")
@pytest.mark.parametrize("op", [op for op in load_stack("cpu").ds_ops if op in MARCH_OPS])
def test_no_avx512_instructions_for_a_v3_target(op: str):
    assert load_stack("cpu").cpu_target == "x86-64-v3"
    disassembly = subprocess.run(
        ["objdump", "-d", "--no-show-raw-insn", str(op_library(op))], capture_output=True, text=True, check=True
    ).stdout
    assert "%ymm" in disassembly or op == "async_io"  # AVX2 is used where it helps
    assert "%zmm" not in disassembly, f"{op} has AVX-512 instructions"


@pytest.mark.skipif(shutil.which("qemu-x86_64") is None, reason="needs qemu-user (apt-get install qemu-user)")
def test_cpu_adam_step_runs_on_an_avx2_only_cpu():
    env = {**os.environ, "DS_ACCELERATOR": "cpu", "OMP_NUM_THREADS": "1", "PYTHONWARNINGS": "ignore"}
    result = subprocess.run(
        ["qemu-x86_64", "-cpu", "Haswell", sys.executable, "-c", STEP_SCRIPT],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert result.returncode == 0, f"exit {result.returncode} (-4 is SIGILL): {result.stderr[-2000:]}"
    capability, value = result.stdout.split()[-2:]
    assert capability == "AVX2"  # the emulated CPU really lacks AVX-512
    assert float(value) == pytest.approx(0.9, abs=1e-3)  # one Adam step of lr 0.1
