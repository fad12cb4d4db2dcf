"""The value parsers of flags and variables: one per kind of value, each failing in one line naming the input.

A flag's `check` (zerokit.foundations.flags) is one of these, called as `check(label, text)` on the
flag's text or its variable's, `label` naming both ("--stop-grace (ZEROKIT_STOP_GRACE)"). `int_list`
is an argparse `type` instead (its errors are argparse's usage errors). The cluster environments
read their schedulers' variables with `whole_number` and `tcp_port` too.
"""

from __future__ import annotations

import argparse
import math
import re
from collections.abc import Callable
from pathlib import Path

from zerokit.foundations.errors import UserError

_WHOLE_NUMBER = re.compile(r"[0-9]+")


def whole_number(name: str, value: str, fix: str) -> int:
    """`value` of variable `name` as an int >= 0; the error names the variable and ends with `fix`."""
    if not _WHOLE_NUMBER.fullmatch(value.strip()):
        raise UserError(f"{name}={value!r} is not a whole number: {fix}")
    return int(value)


def tcp_port(name: str, value: str, fix: str) -> int:
    """`value` of `name` (a variable or flag) as a TCP port, 1-65535; the error ends with `fix`."""
    port = whole_number(name, value, fix)
    if not 1 <= port <= 65535:
        raise UserError(f"{name}={port} is not a TCP port (1-65535): {fix}")
    return port


def at_least(low: int) -> Callable[[str, str], int]:
    """The check of a whole number of at least `low`."""

    def check(name: str, value: str) -> int:
        number = whole_number(name, value, f"give a whole number of at least {low}")
        if number < low:
            raise UserError(f"{name} must be at least {low}, got {number}")
        return number

    check.__name__ = f"at_least_{low}"
    return check


count = at_least(1)  # ranks, processes, layers
tokens_per_block = at_least(2)  # a block of 1 token has no next token to learn
none_or_more = at_least(0)  # restarts


def folder_path(name: str, value: str) -> Path:
    """A folder's path; an empty value (`--output-dir ""`, an unset shell variable) is refused, not read as `.`."""
    if not value.strip():
        raise UserError(f"{name} is empty: give a folder (a shell variable in it may be unset)")
    return Path(value)


def percent_below_100(name: str, value: str) -> int:
    """A whole percentage from 0 to 99 (a share held out)."""
    number = whole_number(name, value, "give a whole number from 0 to 99")
    if number > 99:
        raise UserError(f"{name} must be from 0 to 99, got {number}")
    return number


def seconds(name: str, value: str) -> float:
    """A positive, finite number of seconds (a bound on a wait)."""
    return _number_where(
        name, value, lambda n: math.isfinite(n) and n > 0, "is not a number of seconds: give one above 0, e.g. 30"
    )


def seconds_or_zero(name: str, value: str) -> float:
    """A finite number of seconds, 0 or more (a grace period; 0: none)."""
    return _number_where(
        name,
        value,
        lambda n: math.isfinite(n) and n >= 0,
        "is not a number of seconds: give one of at least 0, e.g. 15",
    )


def factor(name: str, value: str) -> float:
    """A finite factor above 1 (how many times slower)."""
    return _number_where(
        name,
        value,
        lambda n: math.isfinite(n) and n > 1,
        "is not a factor above 1: give e.g. 4 (four times slower than the median)",
    )


def probability(name: str, value: str) -> float:
    """A probability from 0 to 1 (a dropout rate)."""
    return _number_where(
        name, value, lambda n: 0 <= n <= 1, "is not a probability: give one from 0 to 1, e.g. 0 or 0.1"
    )


def temperature(name: str, value: str) -> float:
    """A sampling temperature: 0 (greedy) or more."""
    return _number_where(
        name, value, lambda n: math.isfinite(n) and n >= 0, "is not a temperature: give 0 (greedy) or more, e.g. 0.7"
    )


def top_p(name: str, value: str) -> float:
    """Nucleus sampling's share of the probability mass: above 0, at most 1 (1: all of it)."""
    return _number_where(
        name, value, lambda n: 0 < n <= 1, "is not a share of the probability mass: give one above 0 and at most 1"
    )


def tflops(name: str, value: str) -> float:
    """A device's peak TFLOPS (MFU's denominator): a finite number above 0."""
    return _number_where(
        name, value, lambda n: math.isfinite(n) and n > 0, "is not a peak: give the dense TFLOPS per device, e.g. 989"
    )


def int_list(text: str) -> tuple[int, ...]:
    """Counts of at least 1, comma-separated ("1,2,4"): an argparse type."""
    try:
        values = tuple(int(v) for v in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected numbers separated by commas, e.g. 1,2,4; got {text!r}") from None
    if not values or min(values) < 1:
        raise argparse.ArgumentTypeError(f"expected counts of at least 1, got {text!r}")
    return values


def _number_where(name: str, value: str, accepted: Callable[[float], bool], refusal: str) -> float:
    """The value as a float if `accepted` takes it, else the one-line error `NAME='VALUE' <refusal>`."""
    number = _number(value)
    if not accepted(number):
        raise UserError(f"{name}={value!r} {refusal}")
    return number


def _number(value: str) -> float:
    """The value as a float; NaN (refused by the callers' range checks) when it is not a number."""
    try:
        return float(value)
    except ValueError:
        return math.nan
