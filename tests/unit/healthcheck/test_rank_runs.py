"""The check's ranks for real, on this machine (gloo over loopback): a pass, a rank that never arrives,
a rank that cannot reach rank 0, each ended within its bound with the host named."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import time

from tests.conftest import run_zerokit


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def one_rank(rank: int, world: int, port: int, env: dict[str, str], *flags: str) -> subprocess.CompletedProcess:
    ranks = {"RANK": str(rank), "LOCAL_RANK": "0", "WORLD_SIZE": str(world), "LOCAL_WORLD_SIZE": "1",
             "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port)}  # fmt: skip
    argv = [sys.executable, "-m", "zerokit.healthcheck", *flags]
    return subprocess.run(argv, env={**env, **ranks}, capture_output=True, text=True, timeout=60)


def test_two_local_ranks_pass_and_then_run_the_command(zk_env):
    result = run_zerokit(["launch", "--nproc-per-node", "2", "--no-preflight", "--check-only", "--json"], zk_env)
    assert result.returncode == 0, result.stderr[-3000:]
    report = json.loads(result.stdout)
    assert (report["verdict"], report["backend"], report["ranks"]) == ("pass", "gloo", 2)
    assert [n["ranks"] for n in report["nodes"]] == [2]
    ran = run_zerokit(["launch", "--nproc-per-node", "2", "--no-preflight", "--check", "--", "sh", "-c",
                       "echo ran as $RANK"], zk_env)  # fmt: skip
    assert ran.returncode == 0, ran.stderr[-3000:]
    assert sorted(line for line in ran.stdout.splitlines() if line.startswith("ran as")) == ["ran as 0", "ran as 1"]


def test_a_rank_that_never_arrives_is_named_by_its_host_within_the_bound(zk_env):
    started = time.monotonic()
    result = one_rank(0, 2, free_port(), zk_env, "--timeout", "2", "--hosts", "here,there")
    assert result.returncode == 1
    assert "FAIL 1 rank(s) never arrived within 2 s: there (rank 1); fix: " in result.stderr
    assert time.monotonic() - started < 30


def test_a_rank_that_cannot_reach_rank_0_names_itself_the_address_and_the_fix(zk_env):
    port = free_port()  # nobody listens on it
    result = one_rank(1, 2, port, zk_env, "--timeout", "2")
    assert result.returncode == 1
    line = next(line for line in result.stderr.splitlines() if "FAIL" in line)
    assert f"{socket.gethostname()}: rank 1 cannot reach the main address 127.0.0.1:{port} within 2 s" in line
    assert "--ifname" in line


def test_bad_options_and_a_missing_command_are_one_line_errors(zk_env):
    bad = one_rank(0, 1, free_port(), zk_env, "--timeout", "never")
    assert (bad.returncode, bad.stderr.strip()) == (
        2, "health check: --timeout='never' is not a number of seconds: give one above 0, e.g. 30")  # fmt: skip
    missing = one_rank(0, 1, free_port(), zk_env, "--timeout", "5", "--", "no-such-program-zk")
    assert missing.returncode == 127
    assert "passed, but cannot start no-such-program-zk: No such file or directory" in missing.stderr
