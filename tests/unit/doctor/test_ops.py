"""DeepSpeed ops: required ops prebuilt and loading pass; one that is not prebuilt fails, naming it and the fix."""

from __future__ import annotations

import json
from pathlib import Path

from tests.unit.doctor.conftest import context, failures, only, run_doctor, run_main, write_stack
from zerokit.doctor.ops import check_ops


def test_every_op_of_the_cpu_stack_is_prebuilt_and_loads():
    results = check_ops(context())
    ops = [r for r in results if r.name.startswith("op: ")]
    assert [r.name for r in ops] == [f"op: {name}" for name in context().stack.ds_ops]
    assert {r.status for r in ops} == {"ok"}, [r for r in ops if r.status != "ok"]
    would_jit = only(results, "ops: would JIT")
    assert would_jit.status == "ok"
    assert "deepspeed_ccl_comm" in would_jit.detail  # left out of the cpu stack: needs oneCCL
    assert "cpu_adam" not in would_jit.detail


def test_an_op_that_is_not_prebuilt_fails_naming_it(tmp_path: Path, environ, capsys):
    stack = write_stack(tmp_path, ds_ops='["cpu_adam", "evoformer_attn"]')
    results = check_ops(context(stack=stack))
    assert only(results, "op: cpu_adam").status == "ok"
    evoformer = only(results, "op: evoformer_attn")
    assert evoformer.status == "fail"
    assert evoformer.detail.startswith("evoformer_attn: ")
    assert "make venv STACK=cpu" in evoformer.fix and "zerokit ops-gate cpu" in evoformer.fix

    code, rows = run_main(["--stack", str(stack), "--strict"], environ, capsys)
    assert code == 1
    assert failures(rows) == ["op: evoformer_attn"]


def test_a_deepspeed_that_fails_to_import_is_a_fail_not_a_crash(tmp_path: Path, environ):
    """A broken deepspeed package first on the path: doctor still prints every row."""
    broken = tmp_path / "shadow" / "deepspeed"
    broken.mkdir(parents=True)
    (broken / "__init__.py").write_text("raise ImportError('libcudart.so.13: cannot open shared object file')\n")
    result = run_doctor(["--json", "--strict"], environ, first_on_path=broken.parent)
    assert result.returncode == 1, result.stderr
    rows = json.loads(result.stdout)
    assert failures(rows) == ["ops: deepspeed"]
    (row,) = [r for r in rows if r["name"] == "ops: deepspeed"]
    assert "deepspeed failed to import: ImportError: libcudart.so.13" in row["detail"]
    assert "make venv STACK=cpu" in row["fix"]
    assert any(r["name"] == "/dev/shm" for r in rows)  # the checks after it still ran
