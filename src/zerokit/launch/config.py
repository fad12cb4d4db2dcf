"""`launch`'s arguments, validated into one frozen config (every flag also has an environment variable)."""

from __future__ import annotations

import argparse
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from zerokit.errors import UserError

LAUNCHERS = ("auto", "pdsh", "mpirun")
# Commands that run as `python -m zerokit <name>` when named without `--`.
ZEROKIT_TARGETS = ("train", "generate", "bench", "doctor")


@dataclass(frozen=True)
class LaunchConfig:
    target: tuple[str, ...]  # argv each rank runs
    nproc_per_node: int | None  # None: the scheduler started every rank (per-rank mode)
    launcher: str  # auto: per rank / per node here; pdsh, mpirun: start every node from this one
    hosts_from_file: tuple[str, ...]  # --hostfile, for pdsh/mpirun
    hosts: tuple[str, ...]  # --hosts, set by a head-node launch on each node
    node_host: str | None  # --node-host: which of --hosts this node is
    ifname: str | None
    master_addr: str | None
    master_port: int | None
    workdir: str
    python: str  # the interpreter that runs zerokit here, and on the other nodes (a shared filesystem or image)
    dry_run: bool
    as_json: bool
    print_command: bool
    preflight: bool


def build_parser(environ: Mapping[str, str]) -> argparse.ArgumentParser:
    def env(name: str, default: str | None = None) -> str | None:
        return environ.get(f"ZEROKIT_{name}", default)

    parser = argparse.ArgumentParser(
        prog="launch",
        description="Start ranks of train (or any command after --) under srun, mpirun, PBS, SGE, LSF, or "
        "from a head node over pdsh. Every flag can also be set as ZEROKIT_<FLAG>, e.g. ZEROKIT_NPROC_PER_NODE.",
    )
    add = parser.add_argument
    add(
        "--nproc-per-node",
        type=int,
        default=env("NPROC_PER_NODE"),
        help="start K ranks on each node (one task per node); default: the scheduler started every rank",
    )
    add(
        "--launcher",
        choices=LAUNCHERS,
        default=env("LAUNCHER", "auto"),
        help="auto: this process is a rank or a node; pdsh/mpirun: start all nodes from this head node",
    )
    add("--hostfile", default=env("HOSTFILE"), help="hosts for --launcher pdsh/mpirun, one per line (slots ignored)")
    add("--hosts", default=env("HOSTS"), help=argparse.SUPPRESS)  # set by a head-node launch
    add("--node-host", default=None, help=argparse.SUPPRESS)  # set by a head-node launch (pdsh's %%h)
    add(
        "--ifname",
        default=env("IFNAME"),
        help="network interface for NCCL/gloo (default: the one routing to the main address)",
    )
    add("--master-addr", default=env("MASTER_ADDR"), help="main address (default: MASTER_ADDR, or the first host)")
    add("--master-port", type=int, default=env("MASTER_PORT"), help="main port (default: derived from the job id)")
    add("--dry-run", action="store_true", help="print the plan and run nothing")
    add("--json", action="store_true", help="with --dry-run: the plan as JSON")
    add(
        "--print-command",
        action="store_true",
        help="with --launcher mpirun/pdsh: print the command that starts "
        "every node, shell-quoted, and run nothing (job scripts run it with the host's mpirun)",
    )
    add(
        "--no-preflight",
        action="store_true",
        default=env("NO_PREFLIGHT") == "1",
        help="start without doctor's checks of this node (ops, /dev/shm, interface, caches)",
    )
    add("command", nargs=argparse.REMAINDER, help="train [flags] | -- any command")
    return parser


def read_hostfile(path: str) -> tuple[str, ...]:
    """Hosts of a hostfile (first word of each line; "host slots=4", "host:4" and # comments allowed)."""
    from zerokit.cluster.base import hostfile_hosts

    if not Path(path).is_file():
        raise UserError(f"hostfile not found: {path} (one host per line)")
    return hostfile_hosts({"HOSTFILE": path}, "HOSTFILE")


def target_argv(command: Sequence[str], python: str) -> tuple[str, ...]:
    words = list(command)
    if words and words[0] == "--":
        words = words[1:]
    if not words:
        raise UserError("launch needs a command: `launch [flags] train [train flags]` or `launch [flags] -- cmd ...`")
    return (python, "-m", "zerokit", *words) if words[0] in ZEROKIT_TARGETS else tuple(words)


def parse(argv: Sequence[str], environ: Mapping[str, str], python: str) -> LaunchConfig:
    args = build_parser(environ).parse_args(list(argv))
    nproc = int(args.nproc_per_node) if args.nproc_per_node is not None else None
    if nproc is not None and nproc < 1:
        raise UserError(f"--nproc-per-node must be at least 1, got {nproc}")
    if args.launcher != "auto" and not args.hostfile:
        raise UserError(f"--launcher {args.launcher} needs --hostfile FILE (one host per line)")
    if args.print_command and args.launcher == "auto":
        raise UserError("--print-command prints a head-node command: add --launcher mpirun (or pdsh) --hostfile FILE")
    if bool(args.hosts) != bool(args.node_host):
        raise UserError("--hosts and --node-host go together (a head-node launch sets both)")
    return LaunchConfig(
        target=target_argv(args.command, python),
        nproc_per_node=nproc,
        launcher=args.launcher,
        hosts_from_file=read_hostfile(args.hostfile) if args.hostfile else (),
        hosts=tuple(h for h in (args.hosts or "").split(",") if h),
        node_host=args.node_host,
        ifname=args.ifname,
        master_addr=args.master_addr,
        master_port=int(args.master_port) if args.master_port else None,
        workdir=os.getcwd(),
        python=python,
        dry_run=args.dry_run,
        as_json=args.json,
        print_command=args.print_command,
        preflight=not args.no_preflight,
    )
