"""launch runs doctor's node checks first: a node that cannot train is refused before any rank starts."""

from __future__ import annotations

from pathlib import Path

from tests.conftest import run_zerokit


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
