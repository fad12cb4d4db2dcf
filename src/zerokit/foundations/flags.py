"""Flags defined once, and read from the environment too: the one flag mechanism of every command.

A command's options are a frozen dataclass whose fields carry their flag names, help and argparse
details (`flag(...)`): `add_flags` (or `command_parser`) makes the parser from them and
`from_namespace` the options, so a flag is written in one place, not three (field, add_argument,
constructor). A name without a leading dash is a positional; a command with subcommands (`prepare
tokenize`) has one options dataclass for each.

Every command also reads each of its flags from `ZEROKIT_<FLAG>` (`--output-dir` from
ZEROKIT_OUTPUT_DIR, `--no-preflight` from ZEROKIT_NO_PREFLIGHT): `environ_defaults`, called by
`add_flags` on the actions it made (argparse's own list of actions is private and not read). The command
line wins. A switch takes 1/true/yes/on or 0/false/no/off; a repeatable flag comma-separated values; any
other value goes through the flag's one value parser, whether it came from the command line or the
variable: its argparse `type`, or its `check` (zerokit.foundations.values), which names both in one line
("--stop-grace (ZEROKIT_STOP_GRACE)=..."). A value of the wrong kind fails in one line naming the variable.
A flag can opt out (`env=False`) where the same variable means something to another command (train's
--nproc-per-node would re-read launch's ZEROKIT_NPROC_PER_NODE in every rank); positionals are never read
from it.
"""

from __future__ import annotations

import argparse
import dataclasses
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any, NoReturn, TypeVar

from zerokit.foundations.errors import UserError

T = TypeVar("T")
TRUE, FALSE = ("1", "true", "yes", "on"), ("0", "false", "no", "off", "")
OPTIONS_OF = "zerokit_options"  # set on a command's parser: the options dataclass it was made from
ACTIONS = "zerokit_actions"  # set on a parser: {field name: the argparse action of its flag}, as add_flags made them
EPILOG = "Every flag can also be set as ZEROKIT_<FLAG> (e.g. --foo-bar: ZEROKIT_FOO_BAR)."


def flag(
    *names: str,
    help: str | None,
    default: Any = None,
    env: bool = True,
    check: Callable[[str, str], Any] | None = None,
    also_env: tuple[str, ...] = (),
    **argparse_kwargs: Any,
) -> Any:
    """A dataclass field that is a command-line flag (names as for add_argument; one name without a
    leading dash: a positional, of the field's name).

    check: the flag's value parser, `check(label, text)`, called on the text of the flag or of its
    variable (label names both); a flag without a default (None) is None when that text is blank.
    also_env: variables read, in order, when ZEROKIT_<FLAG> is not set (launch's --master-port: MASTER_PORT).
    """
    if check is not None and "type" in argparse_kwargs:
        raise TypeError(f"{names[0]}: a flag's value has one parser: give type= or check=, not both")
    positional = not names[0].startswith("-")
    metadata = {
        "names": names,
        "help": help,
        "default": default,
        "env": env and not positional,
        "check": check,
        "also_env": tuple(also_env),
        "positional": positional,
        "argparse": argparse_kwargs,
    }
    if isinstance(default, list):  # a repeatable flag's: each options object gets its own list
        return dataclasses.field(default_factory=lambda: list(default), metadata=metadata)
    return dataclasses.field(default=default, metadata=metadata)


def flag_fields(options: type) -> Iterator[dataclasses.Field]:
    """The fields of an options dataclass that are flags, in order."""
    return (f for f in dataclasses.fields(options) if "names" in f.metadata)


def variables(field: dataclasses.Field) -> tuple[str, ...]:
    """The variables a flag reads, in order: ZEROKIT_<FLAG>, then its also_env; none if it opted out."""
    meta = field.metadata
    long = next((n for n in meta["names"] if n.startswith("--")), None)
    if not meta["env"] or long is None:
        return ()
    return (zerokit_variable(long), *meta["also_env"])


def label(field: dataclasses.Field) -> str:
    """How an error names a flag: `--stop-grace (ZEROKIT_STOP_GRACE)`, or the flag alone if it reads no variable."""
    names = field.metadata["names"]
    long = next((n for n in names if n.startswith("--")), names[0])
    found = variables(field)
    return f"{long} ({', '.join(found)})" if found else long


def zerokit_variable(option: str) -> str:
    return f"ZEROKIT_{option.lstrip('-').upper().replace('-', '_')}"


class OneLineErrors(argparse.ArgumentParser):
    """argparse's usage errors (a choice not offered, a missing argument) in one line, as zerokit's own: `error: ...`,
    pointing at --help where argparse would print the whole usage above it."""

    def error(self, message: str) -> NoReturn:
        # `zerokit train`: every environment has the zerokit command; only the image has `train` itself.
        command = self.prog if self.prog.startswith(("zerokit", "python")) else f"zerokit {self.prog}"
        self.exit(2, f"error: {message} (`{command} --help` lists the flags)\n")


def command_parser(options: type, environ: Mapping[str, str], **parser_kwargs: Any) -> argparse.ArgumentParser:
    """A command's parser (prog, description ... as for ArgumentParser), its flags those of options."""
    # allow_abbrev off: a prefix (--nproc 2) is an unknown flag, not silently another one
    parser = OneLineErrors(allow_abbrev=False, **parser_kwargs)
    add_flags(parser, options, environ)
    setattr(parser, OPTIONS_OF, options)
    return parser


def options_of(parser: argparse.ArgumentParser) -> type:
    """The options dataclass that command_parser made parser from."""
    return getattr(parser, OPTIONS_OF)


def flag_actions(parser: argparse.ArgumentParser) -> dict[str, argparse.Action]:
    """{field name: its argparse action} of every flag add_flags put on parser (argparse keeps its own list private)."""
    return dict(getattr(parser, ACTIONS, {}))


def option_strings(parser: argparse.ArgumentParser) -> list[str]:
    """Every flag spelling parser accepts: its flags' and --help's."""
    return ["-h", "--help", *(name for action in flag_actions(parser).values() for name in action.option_strings)]


def add_flags(parser: argparse.ArgumentParser, options: type, environ: Mapping[str, str]) -> None:
    """Add the flags of an options dataclass to parser, then their ZEROKIT_<FLAG> defaults."""
    added = []
    for field in flag_fields(options):
        meta = field.metadata
        default = list(meta["default"]) if isinstance(meta["default"], list) else meta["default"]
        if meta["positional"]:
            names, extra = (field.name,), {"metavar": meta["names"][0]} if meta["names"][0] != field.name else {}
        else:
            names, extra = meta["names"], {"dest": field.name}
        added.append(
            (field, parser.add_argument(*names, default=default, help=meta["help"], **extra, **meta["argparse"]))
        )
    setattr(parser, ACTIONS, {**getattr(parser, ACTIONS, {}), **{field.name: action for field, action in added}})
    environ_defaults(added, environ)
    if parser.epilog is None:
        parser.epilog = EPILOG


def from_namespace(options: type[T], namespace: argparse.Namespace) -> T:
    """The options dataclass from parsed flags, each text through its flag's check (fields without a flag keep
    their defaults)."""
    values = {}
    for field in flag_fields(options):
        value, check = getattr(namespace, field.name), field.metadata["check"]
        if check is not None and isinstance(value, str):
            blank = field.metadata["default"] is None and not value.strip()
            value = None if blank else check(label(field), value)
        values[field.name] = value
    return options(**values)


def environ_defaults(added: list[tuple[dataclasses.Field, argparse.Action]], environ: Mapping[str, str]) -> None:
    """Each flag (field and the action made for it) takes its default from the first of its variables that is set
    (ZEROKIT_<FLAG>, then its also_env; none for a flag that opted out or a positional)."""
    for field, action in added:
        name = next((n for n in variables(field) if n in environ), None)
        if name is not None:
            action.default = env_value(field, action, name, environ[name])
            action.required = False


def env_value(field: dataclasses.Field, action: argparse.Action, name: str, text: str) -> Any:
    if field.metadata["argparse"].get("action") == "append":  # a repeatable flag: comma-separated values
        return [single_value(field, action, name, part) for part in text.split(",") if part]
    return single_value(field, action, name, text)


def single_value(field: dataclasses.Field, action: argparse.Action, name: str, text: str) -> Any:
    if action.nargs == 0:  # a switch: store_true / store_false
        value = text.strip().lower()
        if value not in TRUE + FALSE:
            raise UserError(f"{name}={text!r}: give 1 or 0 (true or false)")
        return (value in TRUE) == (action.const is True)
    if field.metadata["check"] is not None:  # the flag's check parses it, as it does the flag's text
        return text
    try:
        value = action.type(text) if callable(action.type) else text
    except argparse.ArgumentTypeError as error:
        raise UserError(f"{name}={text!r}: {error}") from None
    except (TypeError, ValueError):
        kind = getattr(action.type, "__name__", "value")
        raise UserError(f"{name}={text!r} is not a valid {kind} for {action.option_strings[0]}") from None
    if action.choices is not None and value not in action.choices:
        raise UserError(f"{name}={text!r}: give one of {', '.join(map(str, action.choices))}")
    return value


def flag_value(args: Sequence[str], flag: str) -> str | None:
    """The value of `--flag V` or `--flag=V` in another program's args (the last one wins, as argparse has it)."""
    value = None
    for i, word in enumerate(args):
        if word == flag and i + 1 < len(args):
            value = args[i + 1]
        elif word.startswith(flag + "="):
            value = word.split("=", 1)[1]
    return value
