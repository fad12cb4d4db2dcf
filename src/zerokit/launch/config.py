"""`launch`'s arguments, validated into one frozen config (every flag also has an environment variable)."""

from __future__ import annotations

import argparse
import math
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from zerokit.cluster import ENVIRONMENTS
from zerokit.cluster.base import hostfile_lines_hosts, tcp_port, whole_number
from zerokit.cluster.detect import NAMES as SCHEDULERS
from zerokit.foundations.errors import UserError
from zerokit.healthcheck.command import DEFAULT_SLOW_FACTOR, DEFAULT_TIMEOUT, CheckOptions, factor, seconds
from zerokit.launch.head import HEAD_LAUNCHERS
from zerokit.launch.local import DEFAULT_STOP_GRACE
from zerokit.launch.program import user_script_argv
from zerokit.launch.stall import DEFAULT_STALL_TIMEOUT

# Head-node launchers: start every node from here (zerokit.launch.head).
REMOTE_LAUNCHERS = tuple(HEAD_LAUNCHERS)
# auto: detect where this process runs; a scheduler's name: require it (never fall back to one lone rank).
LAUNCHERS = ("auto", *REMOTE_LAUNCHERS, *SCHEDULERS)
# Commands that run as `python -m zerokit <name>` when named without `--`.
ZEROKIT_TARGETS = ("train", "generate", "bench", "doctor")


@dataclass(frozen=True)
class LaunchConfig:
    target: tuple[str, ...]  # argv each rank runs
    nproc_per_node: int | None  # None: the scheduler started every rank (per-rank mode)
    launcher: str  # auto: per rank / per node here; pdsh, mpirun: start every node; slurm, ...: required here
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
    stop_grace: float  # seconds between passing a stop signal on to the ranks and killing them
    stall_timeout: float = DEFAULT_STALL_TIMEOUT  # seconds without progress on any rank that end the job; 0: off
    check: CheckOptions | None = None  # --check/--check-only: every rank runs the health check first

    @property
    def check_only(self) -> bool:
        return self.check is not None and not self.check.target

    @property
    def scheduler(self) -> str | None:
        """The scheduler `--launcher` requires this process to be started by, if it names one."""
        return self.launcher if self.launcher in SCHEDULERS else None


def build_parser(environ: Mapping[str, str]) -> argparse.ArgumentParser:
    def env(name: str, default: str | None = None) -> str | None:
        return environ.get(f"ZEROKIT_{name}", default)

    parser = argparse.ArgumentParser(
        prog="launch",
        allow_abbrev=False,  # `--nproc 2` is not silently --nproc-per-node
        description="Start ranks of train (or any command after --) under "
        f"{', '.join(dict.fromkeys(env.title for env in ENVIRONMENTS))}, or from a head node over pdsh or mpirun. "
        "Every flag can also be set as ZEROKIT_<FLAG>, e.g. ZEROKIT_NPROC_PER_NODE.",
    )
    add = parser.add_argument
    add(
        "--nproc-per-node",
        default=env("NPROC_PER_NODE"),
        help="start K ranks on each node (one task per node); default: the scheduler started every rank",
    )
    add(
        "--launcher",
        choices=LAUNCHERS,
        default=env("LAUNCHER", "auto"),
        help="auto: this process is a rank or a node, as detected; pdsh/mpirun: start all nodes from this head "
        f"node; {'/'.join(SCHEDULERS)}: as auto, but refuse to start unless that scheduler started this process",
    )
    add("--hostfile", default=env("HOSTFILE"), help="hosts for --launcher pdsh/mpirun, one per line (slots ignored)")
    add("--hosts", default=env("HOSTS"), help=argparse.SUPPRESS)  # set by a head-node launch
    add("--node-host", default=None, help=argparse.SUPPRESS)  # set by a head-node launch (pdsh's %%h)
    add(
        "--ifname",
        default=env("IFNAME"),
        help="network interface for NCCL/gloo (default: the one routing to the main address)",
    )
    add(
        "--master-addr",
        default=env("MASTER_ADDR", environ.get("MASTER_ADDR")),
        help="main address (default: MASTER_ADDR, else the first host, else 127.0.0.1)",
    )
    add(
        "--master-port",
        default=env("MASTER_PORT", environ.get("MASTER_PORT")),
        help="main port (default: MASTER_PORT, else derived from the job id, else a free one)",
    )
    add(
        "--stop-grace",
        metavar="SECONDS",
        default=env("STOP_GRACE", str(DEFAULT_STOP_GRACE)),
        help="on SIGTERM/SIGINT, or when a rank fails, the other ranks get SIGTERM and, SECONDS later, SIGKILL "
        f"(default {DEFAULT_STOP_GRACE:g}: time for train's checkpoint, under Slurm's KillWait of 30)",
    )
    add(
        "--stall-timeout",
        metavar="SECONDS",
        default=env("STALL_TIMEOUT", f"{DEFAULT_STALL_TIMEOUT:g}"),
        help="when no rank has made progress (a collective, a training step, a heartbeat) for SECONDS, get every "
        "rank's Python stacks, name the rank stuck outside any collective, and end the job; a rank waiting for "
        f"peers that never start is named within it too (default {DEFAULT_STALL_TIMEOUT:g}; 0: off)",
    )
    add(
        "--check",
        action="store_true",
        default=env("CHECK") == "1",
        help="every rank first runs the allocation's health check (rendezvous, collectives, every node pair's "
        "link, the nodes' facts); the command starts only if it passes",
    )
    add(
        "--check-only",
        action="store_true",
        default=env("CHECK_ONLY") == "1",
        help="run the health check and exit (no command needed): 0 when it passed, 1 naming the bad node",
    )
    add(
        "--check-timeout",
        metavar="SECONDS",
        default=env("CHECK_TIMEOUT", f"{DEFAULT_TIMEOUT:g}"),
        help=f"bound on each wait of the health check: a rank that never arrives is named after it "
        f"(default {DEFAULT_TIMEOUT:g}; the whole check ends by three times this)",
    )
    add(
        "--check-slow-factor",
        metavar="F",
        default=env("CHECK_SLOW_FACTOR", f"{DEFAULT_SLOW_FACTOR:g}"),
        help="the health check names a node whose best link is F times slower than the median node's "
        f"(default {DEFAULT_SLOW_FACTOR:g})",
    )
    add("--dry-run", action="store_true", help="print the plan and run nothing")
    add("--json", action="store_true", help="with --dry-run: the plan as JSON; with --check: the report as JSON")
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
    fix = "one host per line, as `node1`, `node1 slots=4` or `node1:4`"
    try:
        with open(path, encoding="utf-8") as file:
            lines = file.read().splitlines()
    except (OSError, UnicodeDecodeError) as err:
        reason = err.strerror if isinstance(err, OSError) else "not text"
        raise UserError(f"cannot read hostfile {path} ({reason}): pass a readable file, {fix}") from err
    hosts = hostfile_lines_hosts(lines)
    if not hosts:
        raise UserError(f"hostfile {path} lists no hosts: write {fix}")
    return hosts


def target_argv(command: Sequence[str], python: str) -> tuple[str, ...]:
    words = list(command)
    if words and words[0] == "--":
        words = words[1:]
    if not words:
        raise UserError("launch needs a command: `launch [flags] train [train flags]` or `launch [flags] -- cmd ...`")
    if words[0] in ZEROKIT_TARGETS:
        return (python, "-m", "zerokit", *words)
    return user_script_argv(words, python) or tuple(words)


def parse(argv: Sequence[str], environ: Mapping[str, str], python: str) -> LaunchConfig:
    args = build_parser(environ).parse_args(list(argv))
    if args.launcher not in LAUNCHERS:  # argparse checks the choices of a flag, not of its variable
        raise UserError(f"ZEROKIT_LAUNCHER={args.launcher!r} is not a launcher: use one of {', '.join(LAUNCHERS)}")
    nproc = _count(args.nproc_per_node, "--nproc-per-node (ZEROKIT_NPROC_PER_NODE)")
    if args.launcher in REMOTE_LAUNCHERS and not args.hostfile:
        raise UserError(f"--launcher {args.launcher} needs --hostfile FILE (one host per line)")
    if args.print_command and args.launcher not in REMOTE_LAUNCHERS:
        raise UserError("--print-command prints a head-node command: add --launcher mpirun (or pdsh) --hostfile FILE")
    if bool(args.hosts) != bool(args.node_host):
        raise UserError("--hosts and --node-host go together (a head-node launch sets both)")
    target = () if args.check_only and not args.command else target_argv(args.command, python)
    if args.check_only and target:
        raise UserError("--check-only runs no command: drop the command, or use --check to run it after the check")
    checking = args.check or args.check_only
    options = CheckOptions(
        timeout=seconds(args.check_timeout, "--check-timeout (ZEROKIT_CHECK_TIMEOUT)"),
        slow_factor=factor(args.check_slow_factor, "--check-slow-factor (ZEROKIT_CHECK_SLOW_FACTOR)"),
        as_json=args.json,
        target=target,
    )
    return LaunchConfig(
        target=target,
        nproc_per_node=nproc,
        launcher=args.launcher,
        hosts_from_file=read_hostfile(args.hostfile) if args.hostfile else (),
        hosts=tuple(h for h in (args.hosts or "").split(",") if h),
        node_host=args.node_host,
        ifname=args.ifname,
        master_addr=(args.master_addr or "").strip() or None,
        master_port=_port(args.master_port),
        workdir=os.getcwd(),
        python=python,
        dry_run=args.dry_run,
        as_json=args.json,
        print_command=args.print_command,
        preflight=not args.no_preflight,
        stop_grace=_seconds(args.stop_grace, "--stop-grace (ZEROKIT_STOP_GRACE)"),
        stall_timeout=_seconds(args.stall_timeout, "--stall-timeout (ZEROKIT_STALL_TIMEOUT)"),
        check=options if checking else None,
    )


def _count(value: str | None, name: str) -> int | None:
    if value is None or not str(value).strip():
        return None
    number = whole_number(name, str(value), "give a whole number of at least 1")
    if number < 1:
        raise UserError(f"{name} must be at least 1, got {number}")
    return number


def _port(value: str | None) -> int | None:
    if value is None or not str(value).strip():
        return None
    fix = "give a free TCP port, or set none of --master-port, ZEROKIT_MASTER_PORT and MASTER_PORT"
    return tcp_port("--master-port (ZEROKIT_MASTER_PORT, MASTER_PORT)", str(value), fix)


def _seconds(value: str, name: str) -> float:
    try:
        seconds = float(value)
    except ValueError:
        seconds = math.nan
    if not (math.isfinite(seconds) and seconds >= 0):
        raise UserError(f"{name}={value!r} is not a number of seconds: give one of at least 0, e.g. 15")
    return seconds
