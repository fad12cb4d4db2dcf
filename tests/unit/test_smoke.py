"""The smoke test's verdicts: evaluate() on made-up facts, each failure naming its assertion."""

from __future__ import annotations

import copy
import json

import pytest

from zerokit.commands import smoke
from zerokit.commands.smoke import RUNS, evaluate, markdown, passed
from zerokit.doctor.gpu import GpuInfo
from zerokit.image.built_ops import BuiltOps
from zerokit.image.stack import load_stack

MIB = 2**20


def facts(device: str = "gpu") -> dict:
    """What a healthy run gathers: on gpu an H100 (9.0) with the cuda13 stack's arch lists."""
    run = {"op": "", "ranks": 1, "returncode": 0, "seconds": 20.0, "losses": [5.7, 4.2, 3.1, 1.8]}
    return {
        "device": device,
        "stack": "cuda13" if device == "gpu" else "cpu",
        "steps": 30,
        "doctor": [{"name": "gpu", "status": "ok", "detail": "1 visible", "fix": ""}],
        "health_check": {
            "returncode": 0,
            "report": {
                "verdict": "pass",
                "backend": "nccl" if device == "gpu" else "gloo",
                "collectives": [{"op": "all_reduce", "size": 8, "algbw_gbps": 0.1, "busbw_gbps": 0.0}],
            },
        },
        "gpu": {
            "devices": [["NVIDIA H100 80GB HBM3", [9, 0]]] if device == "gpu" else [],
            "torch_cuda": "13.0" if device == "gpu" else None,
            "torch_arch_list": ["sm_80", "sm_90", "sm_100", "sm_120"] if device == "gpu" else [],
            "stack_arch_list": "8.0;9.0;10.0;12.0" if device == "gpu" else "",
            "bf16": device == "gpu",
        },
        "runs": {
            r.name: {**run, "op": r.op, "peak_gpu_memory_bytes": 900 * MIB if device == "gpu" else None} for r in RUNS
        },
        "generate": {"prompt": "three plus four is", "text": "three plus four is seven ."},
        "torch_extensions": [],
    }


def failed(f: dict) -> list[str]:
    return [a.name for a in evaluate(f) if a.status == "fail"]


@pytest.mark.parametrize("device", ["gpu", "cpu"])
def test_a_healthy_run_passes(device: str):
    assertions = evaluate(facts(device))
    assert passed(assertions)
    skipped = [a.name for a in assertions if a.status == "skip"]
    assert skipped == ([] if device == "gpu" else ["GPU in the arch lists", "peak GPU memory reported"])
    assert "PASSED" in markdown(facts(device), assertions)


def change(device: str, path: str, value) -> dict:
    """facts(device) with the value at a dotted path replaced."""
    f = copy.deepcopy(facts(device))
    keys = [int(k) if k.isdigit() else k for k in path.split(".")]
    node = f
    for key in keys[:-1]:
        node = node[key]
    node[keys[-1]] = value
    return f


@pytest.mark.parametrize("device", ["gpu", "cpu"])
@pytest.mark.parametrize(
    ("path", "value", "assertion"),
    [
        ("doctor", [{"name": "/dev/shm", "status": "fail", "detail": "64 MB", "fix": "--shm-size"}], "doctor --strict"),
        ("doctor", [], "doctor --strict"),  # no checks ran at all
        ("health_check.returncode", 1, "launch --check-only"),
        ("health_check.report.verdict", "fail", "launch --check-only"),
        ("health_check.report", None, "launch --check-only"),  # no JSON report printed
        ("runs.zero3.returncode", 1, "train zero3"),
        ("runs.zero3.losses", [5.7, 5.6, 5.5], "loss falls: zero3"),  # falls, but too little
        ("runs.zero3-offload.losses", [5.7, 6.0], "loss falls: zero3-offload"),
        ("runs.zero3-offload.losses", [], "loss falls: zero3-offload"),
        ("torch_extensions", ["py311_cu130/fused_adam/fused_adam.so"], "no op JIT-compiled"),
        ("generate", {"prompt": "three plus four is", "error": "generate exited 1"}, "generate"),
        ("generate.text", "three plus four is", "generate"),  # nothing new
    ],
)
def test_each_failure_fails_the_smoke_and_names_itself(device: str, path: str, value, assertion: str):
    f = change(device, path, value)
    assert failed(f) == [assertion]
    assert not passed(evaluate(f))
    assert "FAILED" in markdown(f, evaluate(f))


@pytest.mark.parametrize(
    ("path", "value"),
    [
        ("gpu.devices", []),  # no GPU visible
        ("gpu.devices.0.1", [7, 0]),  # a V100: cuda13 dropped sm_70
        ("gpu.torch_arch_list", ["sm_80", "compute_80"]),  # torch only has PTX that would be JIT-compiled for 9.0
        ("gpu.stack_arch_list", "8.0"),  # the prebuilt ops lack 9.0 (sm_80 code does not run on 9.0)
    ],
)
def test_a_gpu_outside_the_arch_lists_fails(path: str, value):
    f = change("gpu", path, value)
    assert failed(f) == ["GPU in the arch lists"]


def test_the_gpu_is_judged_against_the_archs_the_ops_were_recorded_as_built_for():
    """A venv whose ops were built for 9.0 only (recorded at build), on an A100 (8.0): the stack's list has 8.0,
    the ops do not."""
    stack = load_stack("cuda13")
    built = BuiltOps("cuda13", "cuda", "9.0", ("cpu_adam", "fused_adam"), "0.19.8", "0123456789abcdef")
    gpu = smoke.gpu_facts(stack, GpuInfo(None, (), (), None, built))
    assert (gpu["stack_arch_list"], gpu["ops_arch_recorded"]) == ("9.0", True)
    assert smoke.gpu_facts(stack, GpuInfo(None, (), (), None))["stack_arch_list"] == stack.torch_cuda_arch_list
    a100 = change("gpu", "gpu.devices.0.1", [8, 0])
    a100["gpu"] |= {"stack_arch_list": "9.0", "ops_arch_recorded": True}
    (arch,) = [a for a in evaluate(a100) if a.name == "GPU in the arch lists"]
    assert arch.status == "fail" and "ops recorded at build '9.0'; the prebuilt ops have no code for 8.0" in arch.detail


def test_a_newer_minor_capability_runs_code_of_the_same_major():
    assert failed(change("gpu", "gpu.devices.0.1", [8, 6])) == []  # an A10/RTX 30xx on sm_80 code


def test_the_health_check_must_run_on_nccl_on_a_gpu():
    assert failed(change("gpu", "health_check.report.backend", "gloo")) == ["launch --check-only"]


@pytest.mark.parametrize("peak", [None, 0])
def test_peak_gpu_memory_must_be_reported_on_gpu(peak):
    assert failed(change("gpu", "runs.zero3-offload.peak_gpu_memory_bytes", peak)) == ["peak GPU memory reported"]
    assert failed(change("cpu", "runs.zero3-offload.peak_gpu_memory_bytes", peak)) == []


def test_the_command_exits_1_and_writes_the_report_when_an_assertion_fails(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(smoke, "gather", lambda *args: change("cpu", "torch_extensions", ["cpu_adam/cpu_adam.so"]))
    assert smoke.main(["--device", "cpu", "--output", str(tmp_path)]) == 1
    report = json.loads((tmp_path / "smoke-report.json").read_text())
    assert report["passed"] is False
    assert [a["name"] for a in report["assertions"] if a["status"] == "fail"] == ["no op JIT-compiled"]
    assert "| no op JIT-compiled | fail | TORCH_EXTENSIONS_DIR has cpu_adam/cpu_adam.so |" in capsys.readouterr().out
    monkeypatch.setattr(smoke, "gather", lambda *args: facts("cpu"))
    assert smoke.main(["--device", "cpu", "--output", str(tmp_path)]) == 0


def test_an_output_it_cannot_write_or_an_unknown_stack_is_refused_before_anything_runs(tmp_path):
    """Found at the door, in one line: before, a file as --output was a traceback at the first write, and an unknown
    --stack left the output folder it had made."""
    from zerokit.foundations.errors import UserError

    (tmp_path / "a-file").write_text("")
    with pytest.raises(UserError, match="is a file, not a folder: pick another --output"):
        smoke.main(["--device", "cpu", "--output", str(tmp_path / "a-file" / "smoke")])
    with pytest.raises(UserError, match="no stack 'bogus': pick one of cpu"):
        smoke.main(["--device", "cpu", "--stack", "bogus", "--output", str(tmp_path / "smoke")])
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a-file"]
