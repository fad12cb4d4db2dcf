"""Flags defined once (zerokit.foundations.flags): train's options from one dataclass, and ZEROKIT_<FLAG> read by
every command, the command line winning, a bad value refused in one line naming the variable."""

from __future__ import annotations

import argparse
import dataclasses
import importlib
from collections.abc import Callable, Mapping
from pathlib import Path

import pytest

from tests.conftest import run_zerokit
from zerokit.__main__ import COMMANDS, RANK_PROGRAM_PARSERS
from zerokit.foundations import values
from zerokit.foundations.errors import UserError
from zerokit.foundations.flags import flag_actions, flag_fields, from_namespace, options_of, variables
from zerokit.generate import options as generate_options
from zerokit.launch import config as launch_config
from zerokit.launch.config import parse as launch_parse
from zerokit.train import options as train_options
from zerokit.train.cli import parse


def test_train_options_come_from_flags_then_the_environment():
    options, hf = parse(["--output-dir", "runs/a", "--max_steps", "3"], {})
    assert (options.output_dir, options.config, options.overwrite, hf) == (
        Path("runs/a"),
        "zero2",
        False,
        ["--max_steps", "3"],
    )
    environ = {"ZEROKIT_OUTPUT_DIR": "runs/env", "ZEROKIT_OVERWRITE": "1", "ZEROKIT_CONFIG": "zero3"}
    options, _ = parse([], environ)
    assert (options.output_dir, options.overwrite, options.ds_config.name) == (Path("runs/env"), True, "zero3.json")
    options, _ = parse(["--output-dir", "runs/flag"], environ)
    assert options.output_dir == Path("runs/flag")  # the command line wins


def test_train_ignores_launchs_rank_count_variable():
    """launch's ZEROKIT_NPROC_PER_NODE reaches every rank it starts: train must not spawn again on it."""
    options, _ = parse([], {"ZEROKIT_NPROC_PER_NODE": "4"})
    assert options.nproc_per_node == 1


@pytest.mark.parametrize(
    ("environ", "message"),
    [
        ({"ZEROKIT_OVERWRITE": "maybe"}, "ZEROKIT_OVERWRITE='maybe': give 1 or 0"),
        ({"ZEROKIT_BLOCK_SIZE": "big"}, "ZEROKIT_BLOCK_SIZE\\)='big' is not a whole number: give a whole number of at"),
        ({"ZEROKIT_CONFIG": "zero9"}, "DeepSpeed config not found: zero9"),
    ],
)
def test_a_bad_value_names_the_variable(environ: dict[str, str], message: str):
    with pytest.raises(UserError, match=message):
        parse([], environ)


@pytest.mark.parametrize(
    ("argv", "environ", "message"),
    [
        (["train"], {"ZEROKIT_BLOCK_SIZE": "0"}, "--block-size (ZEROKIT_BLOCK_SIZE) must be at least 2, got 0"),
        (["generate", "model"], {"ZEROKIT_BATCH_SIZE": "0"}, "--batch-size must be at least 1"),
        (["bench"], {"ZEROKIT_STEPS": "3"}, "--steps 3 leaves nothing to time"),
        (  # required flags can come from the environment too
            ["prepare", "tokenize", "corpus.txt"],
            {"ZEROKIT_TOKENIZER": "tok", "ZEROKIT_OUTPUT": "out", "ZEROKIT_NUM_PROC": "0"},
            "--num-proc must be at least 1",
        ),
        (["launch", "train"], {"ZEROKIT_NPROC_PER_NODE": "0"}, "at least 1"),
    ],
)
def test_every_command_reads_its_flags_from_the_environment(tmp_path, zk_env, argv, environ, message):
    result = run_zerokit(argv, {**zk_env, **environ}, cwd=tmp_path)
    assert result.returncode == 2 and message in result.stderr, result.stderr[-2000:]


# Every command's flags, from the one source: zerokit.__main__.COMMANDS names the function that makes each
# parser a command runs, and each parser was made from one options dataclass whose fields are the flags.

# The flags that do not read ZEROKIT_<FLAG> (env=False in their flag()), and why.
NOT_FROM_THE_ENVIRONMENT = {
    ("train", "--nproc-per-node"): "launch's ZEROKIT_NPROC_PER_NODE reaches every rank it starts: each would spawn",
    ("healthcheck", "--timeout"): "launch sets it on each rank's command line, from --check-timeout "
    "(ZEROKIT_CHECK_TIMEOUT)",
    ("healthcheck", "--slow-factor"): "launch sets it on each rank's command line, from --check-slow-factor "
    "(ZEROKIT_CHECK_SLOW_FACTOR)",
    ("healthcheck", "--json"): "launch sets it from its own --json; ZEROKIT_JSON (doctor's too) reaches every rank",
    ("healthcheck", "--hosts"): "launch sets it from its plan; ZEROKIT_HOSTS is launch's own (a head-node launch's)",
}

# A flag's value parser (its argparse type, or its check) -> a text for its variable, and the value it gives.
SAMPLES = {
    None: ("some text", "some text"),
    int: ("7", 7),
    float: ("2.5", 2.5),
    Path: ("some/where", Path("some/where")),
    values.int_list: ("3,4", (3, 4)),
    values.count: ("3", 3),
    values.tokens_per_block: ("64", 64),
    values.none_or_more: ("2", 2),
    values.percent_below_100: ("10", 10),
    values.seconds: ("12.5", 12.5),
    values.seconds_or_zero: ("12.5", 12.5),
    values.folder_path: ("some/where", Path("some/where")),
    values.factor: ("3", 3.0),
    values.probability: ("0.25", 0.25),
    values.temperature: ("0.7", 0.7),
    values.top_p: ("0.9", 0.9),
    values.tflops: ("989", 989.0),
    train_options.micro_batch_value: ("auto", "auto"),
    launch_config.address: (" 10.1.2.3 ", "10.1.2.3"),
    launch_config.main_port: ("29400", 29400),
    generate_options.max_memory: ("0=20GiB, 1=20GiB,cpu=64GiB", {0: "20GiB", 1: "20GiB", "cpu": "64GiB"}),
}


def every_parser() -> list[tuple[str, Callable[[Mapping[str, str]], argparse.ArgumentParser]]]:
    found = []
    tables = [(name, command.parsers) for name, command in COMMANDS.items()]
    for command, functions in [*tables, ("healthcheck", RANK_PROGRAM_PARSERS)]:
        for path in functions:
            module, name = path.split(":")
            found.append((command, getattr(importlib.import_module(module), name)))
    return found


def every_flag() -> list[tuple[str, Callable, dataclasses.Field]]:
    return [(command, build, f) for command, build in every_parser() for f in flag_fields(options_of(build({})))]


def flag_name(field: dataclasses.Field) -> str:
    return field.metadata["names"][0]


def sample(field: dataclasses.Field, action: argparse.Action) -> tuple[str, object]:
    """A valid text of the flag's variable, and its value in the options."""
    repeatable = field.metadata["argparse"].get("action") == "append"
    if action.nargs == 0:  # a switch: 1/true/yes/on
        return "yes", action.const
    if action.choices is not None:
        choice = next(c for c in action.choices if c != field.metadata["default"])
        return str(choice), [choice] if repeatable else choice
    text, value = SAMPLES[field.metadata["check"] or field.metadata["argparse"].get("type")]
    return (f"{text},{text}", [value, value]) if repeatable else (text, value)


def parsed(build: Callable, field: dataclasses.Field | None, environ: Mapping[str, str]):
    """The options of the parser build makes, given only what it requires (besides field, set by environ)."""
    parser = build(environ)
    flags, positionals = [], []
    for action in flag_actions(parser).values():
        if action.required and (field is None or action.dest != field.name):
            flags += [action.option_strings[0], "x"] if action.option_strings else []
            positionals += [] if action.option_strings else ["x"]
    return from_namespace(options_of(parser), parser.parse_args([*flags, *positionals]))


def test_every_command_with_flags_names_its_parsers():
    """ops-gate alone takes none (one argument, the stack); every other command's flags are in the table."""
    assert [name for name, command in COMMANDS.items() if not command.parsers] == ["ops-gate"]


@pytest.mark.parametrize(
    ("command", "build", "field"),
    every_flag(),
    ids=[f"{command} {options_of(build({})).__name__} {flag_name(f)}" for command, build, f in every_flag()],
)
def test_every_flag_reads_its_variable_or_says_why_not(command, build, field):
    action = flag_actions(build({}))[field.name]
    default = field.metadata["default"]
    if field.metadata["positional"]:
        assert not variables(field)  # an argument, not a flag: never from the environment
        return
    text, value = sample(field, action)
    if not field.metadata["env"]:
        assert (command, flag_name(field)) in NOT_FROM_THE_ENVIRONMENT, "a flag that opts out says why, here"
        variable = f"ZEROKIT_{flag_name(field)[2:].upper().replace('-', '_')}"
        assert getattr(parsed(build, field, {variable: text}), field.name) == default
        return
    assert variables(field)[0] == f"ZEROKIT_{flag_name(field)[2:].upper().replace('-', '_')}"
    for variable in variables(field):  # ZEROKIT_<FLAG>, then any other it reads (launch's MASTER_ADDR ...)
        options = parsed(build, field, {variable: text})
        assert getattr(options, field.name) == value != default, variable


def test_the_flags_that_opt_out_are_those_listed():
    opted_out = {(command, flag_name(f)) for command, _, f in every_flag() if not f.metadata["env"]}
    opted_out -= {(command, flag_name(f)) for command, _, f in every_flag() if f.metadata["positional"]}
    assert opted_out == set(NOT_FROM_THE_ENVIRONMENT)


@pytest.mark.parametrize("text", ["1", "true", "Yes", "on"])
def test_launchs_switches_read_their_variables_as_every_commands_do(text):
    """launch's --check and --no-preflight once read only "1"; now every switch takes 1/true/yes/on."""
    config = launch_parse(["train"], {"ZEROKIT_CHECK": text, "ZEROKIT_NO_PREFLIGHT": text}, "/venv/bin/python")
    assert config.check is not None and not config.preflight
    with pytest.raises(UserError, match="ZEROKIT_CHECK='maybe': give 1 or 0"):
        launch_parse(["train"], {"ZEROKIT_CHECK": "maybe"}, "/venv/bin/python")


def test_a_variable_a_type_refuses_is_one_line_naming_it():
    with pytest.raises(UserError, match="ZEROKIT_RANKS='1,x': expected numbers separated by commas"):
        parsed(dict(every_parser())["bench"], None, {"ZEROKIT_RANKS": "1,x"})
