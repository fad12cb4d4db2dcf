"""`launch`'s flags, each defined once in LaunchFlags (every one also read from ZEROKIT_<FLAG>), validated
together into one frozen LaunchConfig, which the plan is made from (flags -> config -> plan, as torchrun's).
A new flag is one `flag(...)` field in LaunchFlags, and where `validate` passes it on."""

from __future__ import annotations

import argparse
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from zerokit.cluster import ENVIRONMENTS
from zerokit.cluster.detect import NAMES as SCHEDULERS
from zerokit.foundations.errors import UserError
from zerokit.foundations.flags import command_parser, flag, from_namespace
from zerokit.foundations.values import count, factor, none_or_more, seconds, seconds_or_zero, tcp_port
from zerokit.healthcheck.command import DEFAULT_SLOW_FACTOR, DEFAULT_TIMEOUT, CheckConfig
from zerokit.launch.head import HEAD_LAUNCHERS
from zerokit.launch.hostfile import hosts_and_ranks
from zerokit.launch.nccl_plugin import NcclPlugin, nccl_plugin
from zerokit.launch.program import user_script_argv
from zerokit.launch.watch.heartbeat import DEFAULT_NODE_TIMEOUT
from zerokit.launch.watch.stall import DEFAULT_STALL_TIMEOUT
from zerokit.launch.watch.supervisor import DEFAULT_STOP_GRACE

# Head-node launchers: start every node from here (zerokit.launch.head).
REMOTE_LAUNCHERS = tuple(HEAD_LAUNCHERS)
# auto: detect where this process runs; a scheduler's name: require it (never fall back to one lone rank).
LAUNCHERS = ("auto", *REMOTE_LAUNCHERS, *SCHEDULERS)
# Commands that run as `python -m zerokit <name>` when named without `--`.
ZEROKIT_TARGETS = ("train", "generate", "bench", "doctor")
PORT_FIX = "give a free TCP port, or set none of --master-port, ZEROKIT_MASTER_PORT and MASTER_PORT"


def launcher_name(name: str, text: str) -> str:
    """A launcher's name; argparse checks the choices of a flag, this those of its variable."""
    if text not in LAUNCHERS:
        raise UserError(f"ZEROKIT_LAUNCHER={text!r} is not a launcher: use one of {', '.join(LAUNCHERS)}")
    return text


def address(name: str, text: str) -> str:
    """A host name or address, trimmed."""
    return text.strip()


def main_port(name: str, text: str) -> int:
    """The rendezvous port."""
    return tcp_port(name, text, PORT_FIX)


@dataclass(frozen=True)
class LaunchFlags:
    """`launch`'s flags, each defined once here (zerokit.foundations.flags), as given; `validate` makes the
    LaunchConfig that the plan is made from."""

    nproc_per_node: int | None = flag(
        "--nproc-per-node",
        check=count,
        help="start K ranks on each node (one task per node); default: the scheduler started every rank",
    )
    launcher: str = flag(
        "--launcher",
        choices=LAUNCHERS,
        default="auto",
        check=launcher_name,
        help="auto: this process is a rank or a node, as detected; pdsh/mpirun: start all nodes from this head "
        "node; srun: from a Slurm job's batch script, a step per node of the job; "
        f"{'/'.join(SCHEDULERS)}: as auto, but refuse to start unless that scheduler started this process",
    )
    hostfile: str | None = flag(
        "--hostfile",
        help="hosts for --launcher pdsh/mpirun: `host`, `host slots=N` or `host:N` a line, as DeepSpeed's and MPI's "
        "hostfiles (slots: the ranks a node starts, unless --nproc-per-node says); with srun, some of the job's "
        "nodes (default: all)",
    )
    nnodes: int | None = flag(
        "--nnodes",
        metavar="N",
        check=count,
        help="with --launcher pdsh/mpirun/srun: run the job on the first N hosts of the hostfile (or the Slurm job); "
        "the others are spares: with --max-restarts, a spare that answers takes the place of each node left out, "
        "so the job keeps its size (default: every host)",
    )
    hosts: str | None = flag("--hosts", help=argparse.SUPPRESS)  # set by a head-node launch
    node_host: str | None = flag("--node-host", help=argparse.SUPPRESS)  # set by a head-node launch (pdsh's %%h)
    # Set by a head-node pdsh launch: this launch's stdin is the head's connection (zerokit.launch.head).
    stop_when_stdin_closes: bool = flag(
        "--stop-when-stdin-closes", default=False, action="store_true", help=argparse.SUPPRESS
    )
    ifname: str | None = flag(
        "--ifname", help="network interface for NCCL/gloo (default: the one routing to the main address)"
    )
    master_addr: str | None = flag(
        "--master-addr",
        also_env=("MASTER_ADDR",),
        check=address,
        help="main address (default: MASTER_ADDR, else the first host, else 127.0.0.1)",
    )
    master_port: int | None = flag(
        "--master-port",
        also_env=("MASTER_PORT",),
        check=main_port,
        help="main port (default: MASTER_PORT, else derived from the job id, else a free one)",
    )
    stop_grace: float = flag(
        "--stop-grace",
        metavar="SECONDS",
        default=DEFAULT_STOP_GRACE,
        check=seconds_or_zero,
        help="on SIGTERM/SIGINT, or when a rank fails, the other ranks get SIGTERM and, SECONDS later, SIGKILL "
        f"(default {DEFAULT_STOP_GRACE:g}: time for train's checkpoint, under Slurm's KillWait of 30)",
    )
    stall_timeout: float = flag(
        "--stall-timeout",
        metavar="SECONDS",
        default=DEFAULT_STALL_TIMEOUT,
        check=seconds_or_zero,
        help="when no rank has made progress (a collective, a training step, a heartbeat) for SECONDS, get every "
        "rank's Python stacks, name the rank stuck outside any collective, and end the job; a rank waiting for "
        f"peers that never start is named within it too (default {DEFAULT_STALL_TIMEOUT:g}; 0: off)",
    )
    max_restarts: int = flag(
        "--max-restarts",
        metavar="N",
        default=0,
        check=none_or_more,
        help="when a rank dies of a machine fault (killed by SIGKILL, SIGSEGV, SIGBUS, SIGABRT..., the OOM killer, "
        "or the stall watch), or a node of a --launcher pdsh/mpirun/srun job dies or stops answering, stop the others "
        "and start the job again (on the nodes that answer), train with --resume auto, up to N times; faults are "
        "logged beside the output folder (default 0: never; one node's --nproc-per-node ranks, or a head-node launch)",
    )
    min_nodes: int = flag(
        "--min-nodes",
        metavar="M",
        default=1,
        check=count,
        help="with --launcher pdsh/mpirun/srun and --max-restarts: restart only while at least M nodes of the job "
        "answer; with fewer, end the job in one line (default 1)",
    )
    node_timeout: float = flag(
        "--node-timeout",
        metavar="SECONDS",
        default=DEFAULT_NODE_TIMEOUT,
        check=seconds_or_zero,
        help="with --launcher pdsh/srun and --max-restarts: each node's launch sends the head's a heartbeat every "
        "second; a node silent for SECONDS (cut off, hung) is counted lost and the job restarts without it "
        f"(default {DEFAULT_NODE_TIMEOUT:g}; 0: off)",
    )
    check: bool = flag(
        "--check",
        default=False,
        action="store_true",
        help="every rank first runs the allocation's health check (rendezvous, collectives, every node pair's "
        "link, the nodes' facts); the command starts only if it passes",
    )
    check_only: bool = flag(
        "--check-only",
        default=False,
        action="store_true",
        help="run the health check and exit (no command needed): 0 when it passed, 1 naming the bad node",
    )
    check_timeout: float = flag(
        "--check-timeout",
        metavar="SECONDS",
        default=DEFAULT_TIMEOUT,
        check=seconds,
        help=f"bound on each wait of the health check: a rank that never arrives is named after it "
        f"(default {DEFAULT_TIMEOUT:g}; the whole check ends by three times this)",
    )
    check_slow_factor: float = flag(
        "--check-slow-factor",
        metavar="F",
        default=DEFAULT_SLOW_FACTOR,
        check=factor,
        help="the health check names a node whose best link is F times slower than the median node's "
        f"(default {DEFAULT_SLOW_FACTOR:g})",
    )
    dry_run: bool = flag("--dry-run", default=False, action="store_true", help="print the plan and run nothing")
    json: bool = flag(
        "--json",
        default=False,
        action="store_true",
        help="with --dry-run: the plan as JSON; with --check: the report as JSON",
    )
    print_command: bool = flag(
        "--print-command",
        default=False,
        action="store_true",
        help="with --launcher mpirun/pdsh: print the command that starts "
        "every node, shell-quoted, and run nothing (job scripts run it with the host's mpirun)",
    )
    no_preflight: bool = flag(
        "--no-preflight",
        default=False,
        action="store_true",
        help="start without doctor's checks of this node (ops, /dev/shm, interface, caches)",
    )
    strict_ops: bool = flag(
        "--strict-ops",
        default=False,
        action="store_true",
        help="refuse to start when the job's DeepSpeed config needs an op this install has not prebuilt, which "
        "DeepSpeed would JIT-compile on every node at start (default: a warning; with the node checks, not "
        "with --no-preflight)",
    )
    nccl_plugin: str | None = flag(
        "--nccl-plugin",
        metavar="PATH",
        help="the host's NCCL net plugin (aws-ofi-nccl, SHARP): its .so or a folder holding one libnccl-net*.so; the "
        "ranks get NCCL_NET_PLUGIN and LD_LIBRARY_PATH, and it is checked before they start (the job scripts bind it "
        "into the container from ZEROKIT_NCCL_PLUGIN: docs/network.md)",
    )
    nccl_net_strict: bool = flag(
        "--nccl-net-strict",
        default=False,
        action="store_true",
        help="with --nccl-plugin: also set NCCL_NET to the plugin's name, so NCCL fails rather than fall back to "
        "TCP sockets",
    )
    command: list[str] = flag("command", nargs=argparse.REMAINDER, help="train [flags] | -- any command")


@dataclass(frozen=True)
class LaunchConfig:
    """What launch does, checked: made from LaunchFlags by `validate`."""

    target: tuple[str, ...]  # argv each rank runs
    nproc_per_node: int | None  # None: the scheduler started every rank (per-rank mode)
    launcher: str  # auto: per rank / per node here; pdsh, mpirun, srun: start every node; slurm, ...: required here
    hosts_from_file: tuple[str, ...]  # --hostfile, for pdsh/mpirun (srun: of the job's nodes; all when empty)
    nnodes: int | None  # --nnodes: how many of those the job runs on (the rest are spares); None: all
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
    max_restarts: int = (
        0  # restarts after a machine fault (zerokit.launch.watch.exits, zerokit.launch.restarts.head_node)
    )
    min_nodes: int = 1  # the fewest answering nodes a head-node launch restarts on
    node_timeout: float = DEFAULT_NODE_TIMEOUT  # seconds without a node's heartbeat that count it lost; 0: off
    stop_when_stdin_closes: bool = False  # a node of a head-node pdsh launch: stdin is the head's connection
    check: CheckConfig | None = None  # --check/--check-only: every rank runs the health check first
    strict_ops: bool = False  # refuse, not warn, when the job needs a DeepSpeed op that is not prebuilt
    nccl_plugin: NcclPlugin | None = None  # the host's NCCL net plugin, for the ranks

    @property
    def check_only(self) -> bool:
        return self.check is not None and not self.check.target

    @property
    def scheduler(self) -> str | None:
        """The scheduler `--launcher` requires this process to be started by, if it names one."""
        return self.launcher if self.launcher in SCHEDULERS else None


def build_parser(environ: Mapping[str, str]) -> argparse.ArgumentParser:
    return command_parser(
        LaunchFlags,
        environ,
        prog="launch",
        description="Start ranks of train (or any command after --) under "
        f"{', '.join(dict.fromkeys(env.title for env in ENVIRONMENTS))}, or from a head node over pdsh or mpirun "
        "(or srun, in a Slurm job). "
        "Every flag can also be set as ZEROKIT_<FLAG>, e.g. ZEROKIT_NPROC_PER_NODE.",
        epilog=argparse.SUPPRESS,  # the description says it
    )


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
    return validate(from_namespace(LaunchFlags, build_parser(environ).parse_args(list(argv))), python)


def validate(flags: LaunchFlags, python: str) -> LaunchConfig:
    """The flags checked together, and the config made from them."""
    if flags.launcher in REMOTE_LAUNCHERS and not flags.hostfile and not HEAD_LAUNCHERS[flags.launcher].in_allocation:
        raise UserError(f"--launcher {flags.launcher} needs --hostfile FILE (one host per line)")
    if flags.hostfile and flags.launcher not in REMOTE_LAUNCHERS:
        raise UserError(
            f"--hostfile {flags.hostfile} lists the hosts of a head-node launch, which --launcher {flags.launcher} "
            "is not: add --launcher pdsh|mpirun (or srun, in a Slurm job), or drop --hostfile (and ZEROKIT_HOSTFILE)"
        )
    if flags.print_command and flags.launcher not in REMOTE_LAUNCHERS:
        raise UserError("--print-command prints a head-node command: add --launcher mpirun (or pdsh) --hostfile FILE")
    if flags.nnodes is not None and flags.launcher not in REMOTE_LAUNCHERS:
        raise UserError(
            f"--nnodes {flags.nnodes} picks the hosts of a head-node launch: add --launcher pdsh|mpirun --hostfile H "
            "(or srun, in a Slurm job), or drop --nnodes (and ZEROKIT_NNODES)"
        )
    if bool(flags.hosts) != bool(flags.node_host):
        raise UserError("--hosts and --node-host go together (a head-node launch sets both)")
    target = () if flags.check_only and not flags.command else target_argv(flags.command, python)
    if flags.check_only and target:
        raise UserError("--check-only runs no command: drop the command, or use --check to run it after the check")
    options = CheckConfig(
        timeout=flags.check_timeout, slow_factor=flags.check_slow_factor, as_json=flags.json, target=target
    )
    hosts, nproc_per_node = hosts_and_ranks(flags.hostfile, flags.nproc_per_node)
    return LaunchConfig(
        target=target,
        nproc_per_node=nproc_per_node,
        launcher=flags.launcher,
        hosts_from_file=hosts,
        nnodes=flags.nnodes,
        hosts=tuple(h for h in (flags.hosts or "").split(",") if h),
        node_host=flags.node_host,
        ifname=flags.ifname,
        master_addr=flags.master_addr,
        master_port=flags.master_port,
        workdir=os.getcwd(),
        python=python,
        dry_run=flags.dry_run,
        as_json=flags.json,
        print_command=flags.print_command,
        preflight=not flags.no_preflight,
        stop_grace=flags.stop_grace,
        stall_timeout=flags.stall_timeout,
        max_restarts=flags.max_restarts,
        min_nodes=flags.min_nodes,
        node_timeout=flags.node_timeout,
        stop_when_stdin_closes=flags.stop_when_stdin_closes,
        check=options if flags.check or flags.check_only else None,
        strict_ops=flags.strict_ops,
        nccl_plugin=nccl_plugin(flags.nccl_plugin, flags.nccl_net_strict),
    )
