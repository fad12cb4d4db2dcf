"""The zerokit command line: `zerokit <command> ...`, and the entrypoints `train`, `doctor`, ... on PATH.

One table from command to the function behind it; each module is imported only when its
command runs, so `--help` stays fast and does not import torch.
"""

from __future__ import annotations

import importlib
import os
import signal
import sys

from zerokit.foundations.errors import OneLineError
from zerokit.foundations.process_end import end_process

# command -> ("module:function" taking argv and returning an exit code, one-line summary)
COMMANDS: dict[str, tuple[str, str]] = {
    "train": ("zerokit.train.cli:main", "train a causal LM with the HF Trainer and DeepSpeed ZeRO"),
    "launch": ("zerokit.launch.cli:main", "start ranks of train (or any command) locally or across nodes"),
    "generate": ("zerokit.commands.generate:main", "generate text from a trained model folder"),
    "demo": ("zerokit.commands.demo:main", "the main job: 2 CPU ranks, ZeRO-3, embedded default, then a sample"),
    "doctor": ("zerokit.doctor.cli:main", "preflight checks: fail loudly and name the fix"),
    "prepare": ("zerokit.prepare:main", "stage models and data for offline nodes; tokenize once into blocks"),
    "bench": ("zerokit.bench.cli:main", "scaling, start-up and overhead report: report.md, scaling.png, JSON"),
    "universal": ("zerokit.commands.universal:main", "convert a checkpoint so it resumes on another number of ranks"),
    "smoke": (
        "zerokit.commands.smoke:main",
        "an image's smoke test: doctor, two ZeRO-3 trainings, generate, a report",
    ),
    "ops-gate": ("zerokit.image.ops_gate:main", "fail unless every DeepSpeed op of a stack is prebuilt and loads"),
}

# command -> the functions ("module:function", taking the environment) that make its parsers, each from one
# options dataclass whose fields are its flags, each defined once (zerokit.foundations.flags). prepare has
# two: staging, and `prepare tokenize`. healthcheck is no command but launch --check's rank program.
PARSERS: dict[str, tuple[str, ...]] = {
    "train": ("zerokit.train.cli:build_parser",),
    "launch": ("zerokit.launch.config:build_parser",),
    "generate": ("zerokit.commands.generate:build_parser",),
    "demo": ("zerokit.commands.demo:build_parser",),
    "doctor": ("zerokit.doctor.cli:build_parser",),
    "prepare": ("zerokit.prepare:stage_parser", "zerokit.prepare:tokenize_parser"),
    "bench": ("zerokit.bench.cli:build_parser",),
    "universal": ("zerokit.commands.universal:build_parser",),
    "smoke": ("zerokit.commands.smoke:build_parser",),
    "ops-gate": (),  # no flags: one argument, the stack (a step of the image builds, `zerokit ops-gate STACK`)
    "healthcheck": ("zerokit.healthcheck.command:build_parser",),
}


def usage() -> str:
    lines = ["usage: zerokit <command> [args...]", "", "commands:"]
    lines += [f"  {name:<10} {summary}" for name, (_, summary) in COMMANDS.items()]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if not argv or argv[0] in ("-h", "--help"):
        print(usage())
        return 0 if argv else 2
    name, rest = argv[0], argv[1:]
    if name not in COMMANDS:
        print(f"error: unknown command {name!r}\n{usage()}", file=sys.stderr)
        return 2
    module_name, function_name = COMMANDS[name][0].split(":")
    function = getattr(importlib.import_module(module_name), function_name)
    try:
        return function(rest)
    except OneLineError as error:
        if not error.every_rank or os.environ.get("RANK", "0") == "0":
            print(f"error: {error}", file=sys.stderr)
        return error.exit_code
    except KeyboardInterrupt:  # Ctrl-C outside training's steps (which checkpoint on it): one line, no traceback
        if os.environ.get("RANK", "0") == "0":
            print(f"zerokit {name}: interrupted (SIGINT)", file=sys.stderr)
        return 128 + signal.SIGINT


if __name__ == "__main__":
    end_process(main())  # not sys.exit: a rank of train could abort at finalization (zerokit.foundations.process_end)
