"""The health check's options, as launch passes them to each rank's program, and their parser."""

from __future__ import annotations

import argparse
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from zerokit.foundations.flags import command_parser, flag, from_namespace
from zerokit.foundations.values import factor, seconds

DEFAULT_TIMEOUT = 60.0  # seconds: every wait of the check (the rendezvous, each collective) is bounded by it
DEFAULT_SLOW_FACTOR = 4.0  # a node whose best link is this many times slower than the median node's is named
MODULE = "zerokit.healthcheck"


@dataclass(frozen=True)
class CheckConfig:
    timeout: float = DEFAULT_TIMEOUT
    slow_factor: float = DEFAULT_SLOW_FACTOR
    as_json: bool = False
    hosts: tuple[str, ...] = ()  # the plan's hosts, in node order: who a missing rank was expected on
    target: tuple[str, ...] = ()  # run after a passing check; empty: --check-only


def rank_argv(python: str, options: CheckConfig) -> tuple[str, ...]:
    """What each rank runs: the check, then (through exec) the target."""
    argv = [python, "-m", MODULE, "--timeout", f"{options.timeout:g}", "--slow-factor", f"{options.slow_factor:g}"]
    if options.as_json:
        argv.append("--json")
    if options.hosts:
        argv += ["--hosts", ",".join(options.hosts)]
    if options.target:
        argv += ["--", *options.target]
    return tuple(argv)


@dataclass(frozen=True)
class RankFlags:
    """The rank program's flags, as launch sets them on every rank's command line (rank_argv)."""

    # None of them is read from the environment: launch sets each on the command line, from its own --check-* flags
    # (and their ZEROKIT_CHECK_* variables); ZEROKIT_TIMEOUT, ZEROKIT_JSON or ZEROKIT_HOSTS would reach every
    # rank, meaning other commands' flags.
    timeout: float = flag("--timeout", default=DEFAULT_TIMEOUT, check=seconds, env=False, help=None)
    slow_factor: float = flag("--slow-factor", default=DEFAULT_SLOW_FACTOR, check=factor, env=False, help=None)
    json: bool = flag("--json", default=False, action="store_true", env=False, help=None)
    hosts: str = flag("--hosts", default="", env=False, help=None)
    target: list[str] = flag("target", nargs=argparse.REMAINDER, help=None)


def build_parser(environ: Mapping[str, str] = os.environ) -> argparse.ArgumentParser:
    return command_parser(RankFlags, environ, prog=f"python -m {MODULE}", epilog=argparse.SUPPRESS)


def parse_options(argv: Sequence[str]) -> CheckConfig:
    flags = from_namespace(RankFlags, build_parser().parse_args(list(argv)))
    target = list(flags.target)
    if target and target[0] == "--":
        target = target[1:]
    return CheckConfig(
        timeout=flags.timeout,
        slow_factor=flags.slow_factor,
        as_json=flags.json,
        hosts=tuple(h for h in flags.hosts.split(",") if h),
        target=tuple(target),
    )
