"""Shared by the cluster tests: launch's plan for an environment, as tests/unit/launch/test_plan.py makes it."""

from __future__ import annotations

from zerokit.launch.config import parse
from zerokit.launch.plan import Plan, plan
from zerokit.launch.rank.environment import launch_environment

PY = "/venv/bin/python"


def make_plan(argv: list[str], environ: dict[str, str], cpu_count: int = 8) -> Plan:
    """The plan `launch ARGV` makes under `environ`, the environment found as launch's CLI finds it."""
    config = parse(argv, environ, PY)
    cluster = launch_environment(environ, config.scheduler)
    return plan(config, cluster, environ, cpu_count, lambda address: "ib0", lambda: 41000)
