"""Flags defined once, and read from the environment too.

A command's options are a frozen dataclass whose fields carry their flag names, help and argparse
details (`flag(...)`): `add_flags` makes the parser from them and `from_namespace` the options,
so a flag is written in one place, not three (field, add_argument, constructor).

Every command also reads each of its flags from `ZEROKIT_<FLAG>` (`--output-dir` from
ZEROKIT_OUTPUT_DIR, `--no-preflight` from ZEROKIT_NO_PREFLIGHT): `environ_defaults`, called on
every parser. The command line wins. A value of the wrong kind fails in one line naming the
variable. A flag can opt out (`env=False`) where the same variable means something to another
command (train's --nproc-per-node would re-read launch's ZEROKIT_NPROC_PER_NODE in every rank).
"""

from __future__ import annotations

import argparse
import dataclasses
from collections.abc import Mapping
from typing import Any, TypeVar

from zerokit.foundations.errors import UserError

T = TypeVar("T")
TRUE, FALSE = ("1", "true", "yes", "on"), ("0", "false", "no", "off", "")
NOT_FROM_ENV = "zerokit_not_from_env"  # set on an argparse action that opted out


def flag(*names: str, help: str, default: Any = None, env: bool = True, **argparse_kwargs: Any) -> Any:
    """A dataclass field that is a command-line flag (names as for add_argument)."""
    metadata = {"names": names, "help": help, "env": env, "argparse": argparse_kwargs}
    return dataclasses.field(default=default, metadata=metadata)


def add_flags(parser: argparse.ArgumentParser, options: type, environ: Mapping[str, str]) -> None:
    """Add the flags of an options dataclass to parser, then their ZEROKIT_<FLAG> defaults."""
    for field in dataclasses.fields(options):
        meta = field.metadata
        if "names" in meta:
            action = parser.add_argument(
                *meta["names"], dest=field.name, default=field.default, help=meta["help"], **meta["argparse"]
            )
            setattr(action, NOT_FROM_ENV, not meta["env"])
    environ_defaults(parser, environ)


def from_namespace(options: type[T], namespace: argparse.Namespace) -> T:
    """The options dataclass from parsed flags (fields without a flag keep their defaults)."""
    values = {f.name: getattr(namespace, f.name) for f in dataclasses.fields(options) if "names" in f.metadata}
    return options(**values)


def variable(action: argparse.Action) -> str | None:
    long = next((o for o in action.option_strings if o.startswith("--")), None)
    return f"ZEROKIT_{long[2:].upper().replace('-', '_')}" if long else None


def environ_defaults(parser: argparse.ArgumentParser, environ: Mapping[str, str]) -> None:
    """Each optional flag of parser takes its default from ZEROKIT_<FLAG> when that is set."""
    for action in parser._actions:
        name = variable(action)
        if name is None or action.dest == "help" or getattr(action, NOT_FROM_ENV, False) or name not in environ:
            continue
        action.default = env_value(action, name, environ[name])
        action.required = False
    if parser.epilog is None:
        parser.epilog = "Every flag can also be set as ZEROKIT_<FLAG> (e.g. --foo-bar: ZEROKIT_FOO_BAR)."


def env_value(action: argparse.Action, name: str, text: str) -> Any:
    if isinstance(action, argparse._AppendAction):  # a repeatable flag: comma-separated values
        return [single_value(action, name, part) for part in text.split(",") if part]
    return single_value(action, name, text)


def single_value(action: argparse.Action, name: str, text: str) -> Any:
    if action.nargs == 0:  # a switch: store_true / store_false
        value = text.strip().lower()
        if value not in TRUE + FALSE:
            raise UserError(f"{name}={text!r}: give 1 or 0 (true or false)")
        return (value in TRUE) == (action.const is True)
    try:
        value = action.type(text) if callable(action.type) else text
    except (TypeError, ValueError):
        kind = getattr(action.type, "__name__", "value")
        raise UserError(f"{name}={text!r} is not a valid {kind} for {action.option_strings[0]}") from None
    if action.choices is not None and value not in action.choices:
        raise UserError(f"{name}={text!r}: give one of {', '.join(map(str, action.choices))}")
    return value
