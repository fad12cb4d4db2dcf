"""launch's preflight keeps a passing ops verdict per install and node, and never a failing one."""

from __future__ import annotations

from pathlib import Path

from tests.conftest import run_zerokit
from zerokit.launch.preflight import install_fingerprint, ops_verdict_file


def verdicts(env: dict[str, str]) -> list[Path]:
    return sorted((Path(env["ZEROKIT_CACHE"]) / "preflight").glob("ops-*.ok"))


def test_a_passing_ops_check_is_kept_and_a_failing_one_is_not(tmp_path: Path, zk_env):
    # A CUDA stack's ops on this CPU node: `utils` fails, which this job does not load (a warning): nothing is kept.
    cuda = run_zerokit(["launch", "--", "true"], {**zk_env, "ZEROKIT_STACK": "cuda12"})
    assert cuda.returncode == 0 and "launch: warning: op: utils: " in cuda.stderr, cuda.stderr
    assert verdicts(zk_env) == []

    first = run_zerokit(["launch", "--", "true"], zk_env)
    assert first.returncode == 0, first.stderr
    assert len(verdicts(zk_env)) == 1
    again = run_zerokit(["launch", "--", "true"], zk_env)  # reads the verdict: the same one, nothing added
    assert again.returncode == 0 and len(verdicts(zk_env)) == 1

    still_failing = run_zerokit(["launch", "--", "true"], {**zk_env, "ZEROKIT_STACK": "cuda12"})
    assert "launch: warning: op: utils: " in still_failing.stderr  # another stack's ops: another verdict, checked again


def test_the_verdict_depends_on_the_stack_the_accelerator_and_the_install():
    env = {"ZEROKIT_CACHE": "/cache"}
    ops = ("cpu_adam",)
    base = ops_verdict_file("cpu", ops, env)
    assert base is not None and base.parent == Path("/cache/preflight")
    assert ops_verdict_file("cpu", ops, env) == base  # stable
    assert ops_verdict_file("cuda12", ops, env) != base
    assert ops_verdict_file("cpu", ("cpu_adam", "fused_adam"), env) != base
    assert ops_verdict_file("cpu", ops, {**env, "DS_ACCELERATOR": "cuda"}) != base
    assert ".so:" in install_fingerprint("cpu", ops, env)  # each prebuilt op library's size and mtime
