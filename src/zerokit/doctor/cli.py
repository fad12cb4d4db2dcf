"""`zerokit doctor`: run the checks, print a table (or JSON), and with --strict exit 1 on a fail (or warn)."""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from zerokit.doctor.checks import CHECKS, check_id, run_checks
from zerokit.doctor.context import Context
from zerokit.doctor.result import STATUSES, CheckResult
from zerokit.foundations.flags import command_parser, flag, from_namespace
from zerokit.image.stack import environment_stack, load_stack

STYLES = {"ok": "green", "warn": "yellow", "fail": "bold red", "skip": "dim"}


@dataclass(frozen=True)
class DoctorConfig:
    context: Context
    json: bool
    strict: str | None  # None, "fail" or "warn": the lowest status that makes the exit code 1
    skip: frozenset[str]
    against: Path | None = None  # a run record to compare with, instead of the checks


@dataclass(frozen=True)
class DoctorFlags:
    """`doctor`'s flags, each defined once here (zerokit.foundations.flags); `parse` makes the DoctorConfig."""

    stack: str | None = flag(
        "--stack",
        help="stack name or TOML file the environment was built from (env: ZEROKIT_STACK; default: cpu, or site "
        "in a venv made by make venv STACK=site)",
    )  # None: environment_stack's
    strict: str | None = flag(
        "--strict",
        nargs="?",
        const="fail",
        choices=("fail", "warn"),
        help="exit 1 if any check fails; --strict=warn: also if any warns",
    )
    json: bool = flag(
        "--json", default=False, action="store_true", help="print the results as a JSON list instead of a table"
    )
    against: Path | None = flag(
        "--against",
        type=Path,
        metavar="RECORD",
        help="instead of the checks: compare this environment with a run's zerokit-run.json (or its folder), "
        "one line per difference; exit 1 if any",
    )
    require_gpu: bool = flag(
        "--require-gpu", default=False, action="store_true", help="no visible GPU is a fail, not a warning"
    )
    model: str | None = flag("--model", help="check that this Hub model (or local folder) is complete in the HF cache")
    dataset: str | None = flag(
        "--dataset", help="check that this Hub dataset (or local file/folder) is available offline"
    )
    ifname: str | None = flag(
        "--ifname",
        help="network interface NCCL/gloo will use (default: NCCL_SOCKET_IFNAME, GLOO_SOCKET_IFNAME, "
        "else the one routing to MASTER_ADDR)",
    )
    multi_node: bool = flag(
        "--multi-node",
        default=False,
        action="store_true",
        help="judge for a run across nodes (loopback names, launcher tools)",
    )
    skip: list[str] = flag(
        "--skip",
        action="append",
        default=[],
        metavar="CHECK",
        choices=[check_id(c) for c in CHECKS],
        help=f"leave a check out (repeatable): {', '.join(check_id(c) for c in CHECKS)}",
    )


def build_parser(environ: Mapping[str, str]) -> argparse.ArgumentParser:
    return command_parser(
        DoctorFlags,
        environ,
        prog="doctor",
        description="Preflight checks of this environment against its stack: each row is ok, warn, fail or "
        "skip, with the fix. Exits 0 unless --strict.",
    )


def parse(argv: Sequence[str], environ: Mapping[str, str]) -> DoctorConfig:
    flags = from_namespace(DoctorFlags, build_parser(environ).parse_args(argv))
    context = Context(
        stack=load_stack(flags.stack or environment_stack(environ)),
        environ=environ,
        require_gpu=flags.require_gpu,
        model=flags.model,
        dataset=flags.dataset,
        ifname=flags.ifname,
        multi_node=flags.multi_node,
    )
    return DoctorConfig(
        context=context, json=flags.json, strict=flags.strict, skip=frozenset(flags.skip), against=flags.against
    )


def exit_code(results: Sequence[CheckResult], strict: str | None) -> int:
    failing = {"fail": {"fail"}, "warn": {"fail", "warn"}}.get(strict or "", set())
    return 1 if any(r.status in failing for r in results) else 0


def summary(results: Sequence[CheckResult], seconds: float, stack: str) -> str:
    counts = ", ".join(f"{sum(r.status == s for r in results)} {s}" for s in STATUSES)
    return f"doctor: {counts} (stack {stack}, {seconds:.1f} s)"


def print_table(results: Sequence[CheckResult], footer: str) -> None:
    try:
        from rich.console import Console
        from rich.table import Table
    except ImportError:  # doctor must still talk in a broken environment
        for r in results:
            print(f"{r.status:<5} {r.name}: {r.detail}" + (f"  -> {r.fix}" if r.fix else ""))
        print(footer)
        return
    table = Table("check", "status", "detail", "fix", show_lines=False, highlight=False)
    for r in results:
        table.add_row(r.name, f"[{STYLES[r.status]}]{r.status}[/]", r.detail, r.fix)
    # Not a terminal (a build log, a job's output): wide enough that rows do not wrap into columns of words.
    width = None if sys.stdout.isatty() or os.environ.get("COLUMNS") else 160
    console = Console(width=width)
    console.print(table)
    console.print(footer, highlight=False)


def main(argv: Sequence[str], environ: Mapping[str, str] | None = None) -> int:
    environ = os.environ if environ is None else environ
    options = parse(argv, environ)
    if options.against is not None:
        from zerokit.doctor.against import run_against

        return run_against(options.against, environ, as_json=options.json)
    started = time.monotonic()
    checks = [c for c in CHECKS if check_id(c) not in options.skip]
    with contextlib.redirect_stdout(
        sys.stderr
    ):  # libraries' chatter (DeepSpeed logs to stdout) stays out of the report
        results = run_checks(options.context, checks)
    footer = summary(results, time.monotonic() - started, options.context.stack.name)
    if options.json:
        print(json.dumps([r.as_dict() for r in results], indent=2))
        print(footer, file=sys.stderr)
    else:
        print_table(results, footer)
    return exit_code(results, options.strict)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
