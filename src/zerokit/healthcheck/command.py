"""The health check's options, as launch passes them to each rank's program, and their parser."""

from __future__ import annotations

import argparse
import math
from collections.abc import Sequence
from dataclasses import dataclass

from zerokit.foundations.errors import UserError

DEFAULT_TIMEOUT = 60.0  # seconds: every wait of the check (the rendezvous, each collective) is bounded by it
DEFAULT_SLOW_FACTOR = 4.0  # a node whose best link is this many times slower than the median node's is named
MODULE = "zerokit.healthcheck"


@dataclass(frozen=True)
class CheckOptions:
    timeout: float = DEFAULT_TIMEOUT
    slow_factor: float = DEFAULT_SLOW_FACTOR
    as_json: bool = False
    hosts: tuple[str, ...] = ()  # the plan's hosts, in node order: who a missing rank was expected on
    target: tuple[str, ...] = ()  # run after a passing check; empty: --check-only


def rank_argv(python: str, options: CheckOptions) -> tuple[str, ...]:
    """What each rank runs: the check, then (through exec) the target."""
    argv = [python, "-m", MODULE, "--timeout", f"{options.timeout:g}", "--slow-factor", f"{options.slow_factor:g}"]
    if options.as_json:
        argv.append("--json")
    if options.hosts:
        argv += ["--hosts", ",".join(options.hosts)]
    if options.target:
        argv += ["--", *options.target]
    return tuple(argv)


def seconds(value: str, name: str) -> float:
    """A positive, finite number of seconds, or a UserError naming the flag."""
    number = _number(value)
    if not (math.isfinite(number) and number > 0):
        raise UserError(f"{name}={value!r} is not a number of seconds: give one above 0, e.g. 30")
    return number


def factor(value: str, name: str) -> float:
    number = _number(value)
    if not (math.isfinite(number) and number > 1):
        raise UserError(f"{name}={value!r} is not a factor above 1: give e.g. 4 (four times slower than the median)")
    return number


def _number(value: str) -> float:
    """The value as a float; NaN (refused by the callers' range checks) when it is not a number."""
    try:
        return float(value)
    except ValueError:
        return math.nan


def parse_options(argv: Sequence[str]) -> CheckOptions:
    parser = argparse.ArgumentParser(prog=f"python -m {MODULE}", allow_abbrev=False)
    parser.add_argument("--timeout", default=str(DEFAULT_TIMEOUT))
    parser.add_argument("--slow-factor", default=str(DEFAULT_SLOW_FACTOR))
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--hosts", default="")
    parser.add_argument("target", nargs=argparse.REMAINDER)
    args = parser.parse_args(list(argv))
    target = list(args.target)
    if target and target[0] == "--":
        target = target[1:]
    return CheckOptions(
        timeout=seconds(args.timeout, "--timeout"),
        slow_factor=factor(args.slow_factor, "--slow-factor"),
        as_json=args.json,
        hosts=tuple(h for h in args.hosts.split(",") if h),
        target=tuple(target),
    )
