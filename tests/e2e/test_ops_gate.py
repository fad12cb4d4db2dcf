"""The ops gate (run by `make venv` and the image build) fails, naming the op and why, for an op not prebuilt."""

from __future__ import annotations

import re
from pathlib import Path

from tests.conftest import REPO, run_zerokit


def test_every_op_of_the_cpu_stack_passes(zk_env):
    result = run_zerokit(["ops-gate", "cpu"], zk_env)
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.count("ok   ") == 7


def test_a_stack_asking_for_an_op_that_was_not_built_fails_the_gate(tmp_path: Path, zk_env):
    text = (REPO / "containers/stacks/cpu.toml").read_text()
    stack = tmp_path / "cpu-evoformer.toml"
    stack.write_text(re.sub(r"^ds_ops = \[", 'ds_ops = ["evoformer_attn", ', text, flags=re.M))
    result = run_zerokit(["ops-gate", str(stack)], zk_env)
    assert result.returncode == 1
    assert "FAIL evoformer_attn: DeepSpeed has no op 'evoformer_attn' for this accelerator" in result.stdout
    assert "error: DeepSpeed ops not usable: evoformer_attn" in result.stderr
