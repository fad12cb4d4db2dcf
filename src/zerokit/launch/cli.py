"""`launch`: start ranks of `train` (or any command after `--`).

Arguments -> a plan (a list of Commands) -> execution; `--dry-run --json` prints the plan.
This is the local part (`--nproc-per-node K` on one machine); scheduler and multi-node
modes build on the same plan/execute split.
"""

from __future__ import annotations

import argparse
import json
import os
from dataclasses import asdict

from zerokit.errors import UserError
from zerokit.launch.environment import free_port
from zerokit.launch.local import execute, plan_local, zerokit_argv

# Commands that run as `python -m zerokit <name>` when named without `--`.
ZEROKIT_TARGETS = ("train", "generate", "bench")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="launch",
        description="Start ranks of a command: `launch --nproc-per-node 2 train --config zero3` "
        "or `launch --nproc-per-node 2 -- python my_script.py`.",
    )
    parser.add_argument(
        "--nproc-per-node",
        type=int,
        default=int(os.environ.get("ZEROKIT_NPROC_PER_NODE", "1")),
        help="ranks to start on this node (env: ZEROKIT_NPROC_PER_NODE)",
    )
    parser.add_argument("--master-port", type=int, default=None, help="rendezvous port (default: a free one)")
    parser.add_argument("--dry-run", action="store_true", help="print the plan, run nothing")
    parser.add_argument("--json", action="store_true", help="with --dry-run: print the plan as JSON")
    parser.add_argument("command", nargs=argparse.REMAINDER, help="train ... | -- any command")
    return parser


def target_argv(command: list[str]) -> list[str]:
    if command and command[0] == "--":
        command = command[1:]
    if not command:
        raise UserError("launch needs a command: `launch ... train [flags]` or `launch ... -- python script.py`")
    return zerokit_argv(command) if command[0] in ZEROKIT_TARGETS else command


def main(argv: list[str]) -> int:
    args = build_parser().parse_args(argv)
    if args.nproc_per_node < 1:
        raise UserError(f"--nproc-per-node must be at least 1, got {args.nproc_per_node}")
    port = args.master_port or int(os.environ.get("MASTER_PORT", 0)) or free_port()
    plan = plan_local(args.nproc_per_node, target_argv(args.command), port, os.environ, os.cpu_count() or 1)
    if args.dry_run:
        if args.json:
            print(json.dumps([asdict(c) for c in plan], indent=2))
        else:
            for command in plan:
                env = " ".join(f"{k}={v}" for k, v in sorted(command.env.items()))
                print(f"{env} {' '.join(command.argv)}")
        return 0
    return execute(plan)
