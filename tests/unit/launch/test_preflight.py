"""launch runs doctor's node checks first: a node that cannot train is refused before any rank starts; a DeepSpeed op
that fails refuses only a job that loads it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.conftest import run_zerokit
from zerokit.doctor import ops as doctor_ops
from zerokit.image.ds_install import Prebuilt
from zerokit.image.ops_gate import OpStatus
from zerokit.launch.config import parse
from zerokit.launch.job import read_job
from zerokit.launch.job_ops import ops_loaded
from zerokit.launch.plan import plan
from zerokit.launch.preflight import preflight_failures
from zerokit.sources.ds_configs import bundled

PY = "/venv/bin/python"


def test_a_failed_check_stops_the_launch_with_its_fix(tmp_path: Path, zk_env):
    marker = tmp_path / "ran"
    env = {**zk_env, "TORCH_EXTENSIONS_DIR": "/etc/passwd"}
    result = run_zerokit(["launch", "--nproc-per-node", "2", "--", "touch", str(marker)], env)
    assert result.returncode == 1
    assert "preflight failed: cache: TORCH_EXTENSIONS_DIR: /etc/passwd is not a directory" in result.stderr
    assert "fix: point TORCH_EXTENSIONS_DIR at a writable directory" in result.stderr
    assert not marker.exists()


def test_healthy_node_starts_every_rank_and_no_preflight_skips_the_checks(tmp_path: Path, zk_env):
    result = run_zerokit(["launch", "--nproc-per-node", "2", "--", "sh", "-c", f"touch {tmp_path}/$RANK"], zk_env)
    assert result.returncode == 0, result.stderr
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.isdigit()) == ["0", "1"]
    marker = tmp_path / "unchecked"
    env = {**zk_env, "TORCH_EXTENSIONS_DIR": "/etc/passwd"}
    assert run_zerokit(["launch", "--no-preflight", "--", "touch", str(marker)], env).returncode == 0
    assert marker.exists()


# As on the H200 of 2026-11-28: async_io prebuilt, but its libaio.so.1 not on the node's loader path.
NO_LIBAIO = "prebuilt but fails to load: ImportError: libaio.so.1: cannot open shared object file: No such file"
CPU_IMAGE = Prebuilt("cpu", {"cpu_adam": True, "fused_adam": True, "async_io": True})


@pytest.fixture
def async_io_fails_to_load(monkeypatch) -> None:
    """doctor's op check finds async_io failing to load and every other op loading."""

    def check_op(name: str) -> OpStatus:
        return OpStatus(name, False, NO_LIBAIO) if name == "async_io" else OpStatus(name, True, "prebuilt and loads")

    monkeypatch.setattr(doctor_ops, "check_op", check_op)


def preflight(command: list[str], env: dict[str, str]) -> list[str]:
    """launch's preflight of `launch --nproc-per-node 1 COMMAND`, the job's ops read as launch reads them."""
    config = parse(["--nproc-per-node", "1", *command], env, PY)
    the_plan = plan(config, None, env, 1, lambda address: None, lambda: 41000)
    return preflight_failures(the_plan, env, ops_loaded(read_job(config.target, env), env, CPU_IMAGE))


@pytest.mark.usefixtures("async_io_fails_to_load")
def test_an_op_that_fails_to_load_refuses_a_job_that_loads_it_and_warns_any_other(tmp_path: Path, zk_env, capsys):
    env = {**zk_env, "ZEROKIT_STACK": "cpu"}  # its ops include async_io
    assert preflight(["train", "--config", "zero2"], env) == []  # ZeRO-2 with AdamW: fused_adam, no async_io
    (warning,) = capsys.readouterr().err.splitlines()
    assert warning.startswith(f"launch: warning: op: async_io: async_io: {NO_LIBAIO}; ")
    assert "; starting anyway: the job's DeepSpeed config does not load it; fix: install on this node the " in warning
    assert "(libaio.so.1: the libaio1 package" in warning

    zero2 = json.loads(bundled("zero2").read_text())
    writer = tmp_path / "writer.json"  # a fast checkpoint writer swaps through async_io
    writer.write_text(json.dumps({**zero2, "checkpoint": {"writer": {"type": "fast"}}}))
    (refusal,) = preflight(["--", "fit.sh", "--deepspeed", str(writer)], env)
    assert refusal.startswith(f"op: async_io: async_io: {NO_LIBAIO}; ")
    assert "; the job's DeepSpeed config loads it (checkpoint.writer of type fast); fix: install " in refusal
    assert capsys.readouterr().err == ""

    assert preflight(["--", "fit.sh"], env) == []  # a script whose config launch cannot see: warned, not refused
    (warning,) = capsys.readouterr().err.splitlines()
    assert "op: async_io" in warning and "the job names no DeepSpeed config launch can read" in warning
