"""The zerokit command line: `zerokit <command> ...`, and the entrypoints `train`, `doctor`, ... on PATH.

One table from command to the function behind it, its summary and its parsers; each module is imported
only when its command runs, so `--help` stays fast and does not import torch.
"""

from __future__ import annotations

import importlib
import os
import sys
from dataclasses import dataclass

from zerokit.foundations.errors import OneLineError
from zerokit.foundations.pool_signals import stop_signal
from zerokit.foundations.process_end import end_process


@dataclass(frozen=True)
class Command:
    """A command: the function behind it ("module:function", taking argv, returning an exit code), a one-line
    summary, and the functions ("module:function", taking the environment) that make its parsers, each from one
    flags dataclass whose fields are its flags, defined once (zerokit.foundations.flags)."""

    main: str
    summary: str
    parsers: tuple[str, ...] = ()


# Where a command lives (docs/architecture.md): a command of several modules is the package zerokit/<command>/
# with its cli.py; a command of one module is zerokit/commands/<command>.py.
COMMANDS: dict[str, Command] = {
    "train": Command(
        "zerokit.train.cli:main",
        "train a causal LM with the HF Trainer and DeepSpeed ZeRO",
        ("zerokit.train.cli:build_parser",),
    ),
    "launch": Command(
        "zerokit.launch.cli:main",
        "start ranks of train (or any command) locally or across nodes",
        ("zerokit.launch.config:build_parser",),
    ),
    "generate": Command(
        "zerokit.generate.cli:main",
        "generate text from a trained model folder",
        ("zerokit.generate.options:build_parser",),
    ),
    "demo": Command(
        "zerokit.commands.demo:main",
        "the main job: 2 CPU ranks, ZeRO-3, embedded default, then a sample",
        ("zerokit.commands.demo:build_parser",),
    ),
    "doctor": Command(
        "zerokit.doctor.cli:main",
        "preflight checks: fail loudly and name the fix",
        ("zerokit.doctor.cli:build_parser",),
    ),
    "prepare": Command(
        "zerokit.prepare.cli:main",
        "stage models and data for offline nodes; tokenize once into blocks",
        ("zerokit.prepare.cli:stage_parser", "zerokit.prepare.cli:tokenize_parser"),  # staging; `prepare tokenize`
    ),
    "bench": Command(
        "zerokit.bench.cli:main",
        "scaling, start-up and overhead report: report.md, scaling.png, JSON",
        ("zerokit.bench.cli:build_parser",),
    ),
    "universal": Command(
        "zerokit.commands.universal:main",
        "convert a checkpoint so it resumes on another number of ranks",
        ("zerokit.commands.universal:build_parser",),
    ),
    "smoke": Command(
        "zerokit.commands.smoke:main",
        "an image's smoke test: doctor, two ZeRO-3 trainings, generate, a report",
        ("zerokit.commands.smoke:build_parser",),
    ),
    # No flags: one argument, the stack (a step of the image builds, `zerokit ops-gate STACK`).
    "ops-gate": Command(
        "zerokit.commands.ops_gate:main", "fail unless every DeepSpeed op of a stack is prebuilt and loads"
    ),
}
# Not a command but launch --check's rank program, with flags of its own.
RANK_PROGRAM_PARSERS = ("zerokit.healthcheck.command:build_parser",)


def usage() -> str:
    lines = ["usage: zerokit <command> [args...]", "", "commands:"]
    lines += [f"  {name:<10} {command.summary}" for name, command in COMMANDS.items()]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if not argv or argv[0] in ("-h", "--help"):
        print(usage())
        return 0 if argv else 2
    name, rest = argv[0], argv[1:]
    if name not in COMMANDS:
        known = ", ".join(COMMANDS)
        sys.stderr.write(f"error: unknown command {name!r}: one of {known} (`zerokit --help` says what each does)\n")
        return 2
    module_name, function_name = COMMANDS[name].main.split(":")
    function = getattr(importlib.import_module(module_name), function_name)
    try:
        return function(rest)
    except OneLineError as error:
        if not error.every_rank or os.environ.get("RANK", "0") == "0":
            print(f"error: {error}", file=sys.stderr)
        return error.exit_code
    except KeyboardInterrupt as stop:  # Ctrl-C (or SIGTERM where a pool works) outside training's steps: one line
        stopped_by = stop_signal(stop)
        if os.environ.get("RANK", "0") == "0":
            print(f"zerokit {name}: interrupted ({stopped_by.name})", file=sys.stderr)
        return 128 + stopped_by


if __name__ == "__main__":
    end_process(main())  # not sys.exit: a rank of train could abort at finalization (zerokit.foundations.process_end)
