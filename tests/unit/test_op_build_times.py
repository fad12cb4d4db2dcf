"""containers/op-build-times: the seconds each DeepSpeed op took to compile, read from a real command's output as it
comes (setuptools' "building 'OP' extension", then the op's link), and the command's exit status kept."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path
from types import ModuleType

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "containers" / "op-build-times"

# What `pip wheel -v` prints of DeepSpeed's build: two ops side by side, the slower linked last.
LIB = "build/lib.linux-x86_64-cpython-311/deepspeed/ops/adam"
BUILD = f"""
echo "  building 'deepspeed.ops.adam.fused_adam_op' extension"
echo "  building 'deepspeed.ops.adam.cpu_adam_op' extension"
echo "  c++ -c csrc/adam/cpu_adam.cpp -o build/temp/csrc/adam/cpu_adam.o"
sleep 0.3
echo "  c++ -shared build/temp/csrc/adam/cpu_adam.o -o {LIB}/cpu_adam_op.cpython-311-x86_64-linux-gnu.so"
sleep 0.6
echo "  c++ -shared build/temp/multi_tensor_adam.o -o {LIB}/fused_adam_op.cpython-311-x86_64-linux-gnu.so"
"""


def run(tmp_path: Path, script: str) -> subprocess.CompletedProcess:
    argv = [sys.executable, SCRIPT, tmp_path / "build.log", "--", "sh", "-c", script]
    return subprocess.run(argv, capture_output=True, text=True, timeout=60)


def test_each_op_is_timed_from_its_start_to_its_link_slowest_first(tmp_path: Path):
    result = run(tmp_path, BUILD)
    assert result.returncode == 0, result.stderr
    said = re.findall(r"build-ds-wheel: op (\w+) compiled in ([\d.]+) s", result.stdout)
    assert [name for name, _ in said] == ["fused_adam_op", "cpu_adam_op"]
    seconds = dict((name, float(value)) for name, value in said)
    assert 0.8 <= seconds["fused_adam_op"] < 3 and 0.2 <= seconds["cpu_adam_op"] < seconds["fused_adam_op"]
    summary = r"the wheel built in [\d.]+ s: [\d.]+ s before the first op .* of 2 ops \(several at once\)"
    assert re.search(summary, result.stdout), result.stdout
    log = (tmp_path / "build.log").read_text()
    assert "building 'deepspeed.ops.adam.cpu_adam_op' extension" in log  # every line kept, timed


def test_a_failed_build_shows_its_last_lines_and_keeps_its_exit_status(tmp_path: Path):
    result = run(tmp_path, 'echo "  error: command nvcc failed"; exit 3')
    assert result.returncode == 3
    assert "error: command nvcc failed" in result.stderr and "the build failed after" in result.stdout


def load_proof() -> ModuleType:
    """tests/gpu/proof (a script, not a module) as a module."""
    import importlib.machinery
    import importlib.util

    loader = importlib.machinery.SourceFileLoader("gpu_proof", str(REPO / "tests" / "gpu" / "proof"))
    proof = importlib.util.module_from_spec(importlib.util.spec_from_loader("gpu_proof", loader))
    loader.exec_module(proof)
    return proof


def test_the_gpu_proof_lists_the_venv_steps_timed_lines(tmp_path: Path):
    """tests/gpu/proof's venv step keeps what install-lock, build-ds-wheel and op-build-times said they took."""
    proof = load_proof()
    timed = [
        "install-lock: 84 packages of containers/lock/site.txt installed in 41 s",
        "install-lock: their .pyc compiled in 12 s",
        "build-ds-wheel: op fused_adam_op compiled in 61.2 s",
        "build-ds-wheel: the wheel built in 64.0 s (6 ops, compiled at once); log: build/x/build-ds-wheel.log",
    ]
    log = tmp_path / "venv.log"
    log.write_text("\n".join(["$ make venv STACK=site", timed[0], "Collecting x", *timed[1:], "touch .ready"]) + "\n")
    assert proof.venv_phases(log) == timed
    reused = "cached-ds-wheel: reused /root/.cache/zerokit/ds-wheels/cuda-0123 (built from the same inputs)"
    log.write_text(f"{timed[0]}\n{reused}\n")
    assert proof.venv_phases(log) == [timed[0], reused]


def test_the_gpu_proofs_jit_step_counts_extensions_not_torch_compiles_kernels(tmp_path: Path):
    """Triton builds its launchers as .so files into the compile caches bench gives each compiled run (on a GPU, the
    overhead group's): torch.compile at work, not a DeepSpeed op JIT-compiled; the extensions folder's op is one."""
    from zerokit.bench.plan import own_compile_caches

    proof = load_proof()
    out = tmp_path / "proof"
    run = out / "bench" / "runs" / "overhead-zerokit-1"
    op = out / "torch-extensions" / "fused_adam" / "fused_adam.so"
    built = [op, out / "venv-site" / "lib" / "deepspeed_op.so"]
    built += [Path(cache) / "ab" / "__triton_launcher.so" for cache in own_compile_caches(run).values()]
    for so in built:
        so.parent.mkdir(parents=True)
        so.write_bytes(b"")
    assert proof.jit_libraries(out, (out / "venv-site",), [], 0.0) == [str(op)]


def test_the_gpu_proof_refuses_an_unknown_bench_group_before_any_step(tmp_path: Path):
    """--bench-skip is checked against bench's own groups at once, not when the bench step starts in a lease."""
    import subprocess
    import sys

    from zerokit.bench.plan import SKIPPABLE

    proof = [sys.executable, str(REPO / "tests" / "gpu" / "proof"), "--output", str(tmp_path / "proof")]
    result = subprocess.run([*proof, "--bench-skip", "checkpoint,overhed"], capture_output=True, text=True)
    assert result.returncode == 2 and "--bench-skip: unknown group(s) overhed: pick from " in result.stderr
    assert ", ".join(SKIPPABLE) in result.stderr and not (tmp_path / "proof").exists()
