"""The smoke test on one NVIDIA GPU, in process: what `make smoke` asserts inside the image.

Run it in a CUDA environment (the cuda13 dev environment, or a checkout inside the image):
`ZEROKIT_STACK=cuda13 pytest -m gpu`. Skipped, with the reason, where torch sees no GPU.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

from zerokit.commands.smoke import RUNS, smoke  # noqa: E402

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs an NVIDIA GPU: torch.cuda.is_available() is False"),
]


@pytest.fixture(scope="module")
def report(tmp_path_factory) -> dict:
    """One smoke run for the whole module (about two minutes)."""
    stack = os.environ.get("ZEROKIT_STACK", "cuda13")
    return smoke("gpu", tmp_path_factory.mktemp("smoke"), stack)


def test_every_assertion_passes_none_skipped(report: dict):
    statuses = {a["name"]: a["status"] for a in report["assertions"]}
    assert set(statuses.values()) == {"pass"}, [a for a in report["assertions"] if a["status"] != "pass"]
    assert report["passed"] is True


def test_doctor_strict_with_a_required_gpu_passes(report: dict):
    rows = report["facts"]["doctor"]
    assert [r for r in rows if r["status"] == "fail"] == []
    assert any(r["name"] == "gpu" and r["status"] == "ok" for r in rows)


@pytest.mark.parametrize("run", [r.name for r in RUNS])
def test_one_rank_on_the_gpu_loss_falls_and_peak_memory_is_reported(report: dict, run: str):
    facts = report["facts"]["runs"][run]
    assert facts["returncode"] == 0 and facts["ranks"] == 1
    assert len(facts["losses"]) == 6 and facts["losses"][-1] < 0.9 * facts["losses"][0], facts["losses"]
    assert facts["peak_gpu_memory_bytes"] > 0


def test_the_gpu_is_in_both_arch_lists(report: dict):
    """Native code for the GPU (same major, minor not above it) in torch and in the stack's prebuilt ops."""
    from zerokit.doctor.gpu import covers, parse_arch_list

    gpu = report["facts"]["gpu"]
    capability = tuple(gpu["devices"][0][1])
    torch_native = {divmod(int(a[3:].rstrip("af")), 10) for a in gpu["torch_arch_list"] if a.startswith("sm_")}
    assert any(covers(built, capability) for built in torch_native), gpu
    assert any(covers(built, capability) for built in parse_arch_list(gpu["stack_arch_list"])[0]), gpu
    assert gpu["bf16"] == torch.cuda.is_bf16_supported()


def test_no_op_was_jit_compiled_and_generate_works(report: dict):
    facts = report["facts"]
    assert facts["torch_extensions"] == []
    assert not any(Path(facts["torch_extensions_dir"]).rglob("*"))
    assert len(facts["generate"]["text"]) > len(facts["generate"]["prompt"])
