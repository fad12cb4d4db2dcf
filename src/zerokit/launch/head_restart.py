"""`launch --max-restarts N` from the head node (`--launcher pdsh|mpirun|mpiexec --hostfile H`, or `--launcher srun`
in a Slurm job's batch step): when a node's ranks die or a node stops answering, the job starts again on the hosts
that answer, from the run's last whole checkpoint (train with `--resume auto`, as on one node:
zerokit.launch.restart), while at least `--min-nodes` of them do.

- A node's end, seen: under pdsh and srun, one command per host (zerokit.launch.plan.head_commands: a pdsh, a
  step of one task), so that launch sees which node's launch ended, and when: with its ranks' machine fault (137
  for a SIGKILL, through ssh and pdsh), or with ssh's 255 (the connection lost: the node died, or it left ssh's
  keepalives unanswered: zerokit.launch.head). The other hosts' commands are stopped as any failed rank's peers
  are (the supervisor); once its pdsh is gone, each node's launch stops its ranks within `--stop-grace` (its
  stdin closes), and a stopped srun has Slurm end its step's tasks; a restart starts once nothing listens at its
  main address and port (the stopped job's store). An MPI launcher ends every rank itself when one dies
  (OpenMPI's mpirun: 137 for a rank SIGKILLed, 205 when it lost a node's daemon).
- A node cut off, seen: each node's launch sends the head's a heartbeat every second (zerokit.launch.heartbeat);
  a node silent for --node-timeout has its command here ended, which then fails as a node's end does.
- Which hosts answer: after a failed end, every host probed at once, within PROBE_SECONDS (zerokit.launch.probe:
  `ssh HOST true`; in a Slurm job, Slurm's view of the node and a step of `true` on it). A host that does not
  answer is left out, and the job starts again on the others, in the hostfile's (or the Slurm job's) order (the
  first is the main address, unless --master-addr names one). With --nnodes N, the job runs on the first N hosts
  and the rest are spares, probed too: one that answers takes the place of each host left out (next_hosts).
- What restarts: a node fault, that is a command ended by a machine fault or ssh's 255, or any failed end
  after which a host does not answer (mpirun's lost daemon; a node's peers that failed in their collectives
  before its own end was seen). A stop signal to launch (preemption, Ctrl-C), a run whose final model is
  written, and a failed end after which every host answers and no node's launch died of a machine fault (a
  user error, a diverged loss) never restart.
- Each fault is logged with the nodes at fault, those left out and the hosts the restart runs on, in the log
  of one node's restarts (zerokit.launch.restart.log_path), which a restarted train copies into zerokit-run.json.
"""

from __future__ import annotations

import socket
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path

from zerokit.foundations import restart_log
from zerokit.image.provenance import now
from zerokit.launch.config import LaunchConfig
from zerokit.launch.execute import resume_point, write_log
from zerokit.launch.heartbeat import HeartbeatWatch
from zerokit.launch.plan import Plan
from zerokit.launch.probe import PROBE_SECONDS, silent_hosts
from zerokit.launch.restart import is_machine_fault, log_path, rescaled_argv, restart_argv
from zerokit.launch.supervisor import (
    Supervisor,
    exit_code,
    has_final_model,
    output_dir,
    outputs_state,
    queued_signals,
    say,
    supervise,
)

SSH_LOST = 255  # ssh's status when it could not connect, or lost its connection
# Makes the plan of the job on other hosts: plan.plan, with this launch's cluster, interfaces and ports.
Replan = Callable[[LaunchConfig, Mapping[str, str]], Plan]


@dataclass(frozen=True)
class NodeFault:
    """What ended a head-node launch's job, where a node is to blame (see the module's docstring)."""

    failed: tuple[str, ...]  # the hosts whose launch died of a machine fault or lost its connection (pdsh's)
    silent: dict[str, str]  # the hosts that did not answer -> why, in ssh's words
    code: int  # launch's exit status for it
    cause: str  # what ended, in words

    @property
    def nodes(self) -> tuple[str, ...]:
        """The nodes at fault: those whose launch ended, and those that no longer answer (none named: an MPI
        launcher's rank died, and its own report names the node)."""
        return tuple(dict.fromkeys((*self.failed, *self.silent)))


def is_node_fault(returncode: int) -> bool:
    """Whether a head-node command's end (Popen's return code) says its node failed: its ranks' machine fault,
    or ssh's lost connection."""
    return is_machine_fault(returncode) or exit_code(returncode) == SSH_LOST


def node_fault(supervisor: Supervisor, hosts: Sequence[str], code: int, launcher: str) -> NodeFault | None:
    """What ended the job (`code`: launch's status for it), when a node is to blame; None otherwise. Probes the
    hosts as `launcher` reaches them (zerokit.launch.probe)."""
    ended = [rank for rank in supervisor.ranks if not rank.stopped and is_node_fault(rank.process.returncode)]
    silent = silent_hosts(launcher, hosts)
    if not ended and not silent:
        return None
    named = ended or [rank for rank in (supervisor.failure,) if rank is not None]
    said = [f"{rank.label} {supervisor.ended_how(rank)}" for rank in named]
    said += [f"{host} does not answer ({why})" for host, why in silent.items()]
    failed = tuple(rank.host for rank in ended if rank.host)
    return NodeFault(failed, silent, code, "; ".join(said))


def next_hosts(the_plan: Plan, left_out: Mapping[str, str]) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """The hosts a restart runs on, and the spares still free: the job's hosts that answer, in their order, then
    a spare that answers in the place of each host left out (--nnodes); without one the job shrinks."""
    kept = tuple(host for host in the_plan.hosts if host not in left_out)
    free = tuple(host for host in the_plan.spares if host not in left_out)
    taken = free[: len(the_plan.hosts) - len(kept)]
    return (*kept, *taken), free[len(taken) :]


def restart_config(config: LaunchConfig, hosts: tuple[str, ...], spares: tuple[str, ...], first: int) -> LaunchConfig:
    """The config of the job started again on hosts (`first` of them started it), the spares left behind them:
    train resumes (restart_argv) with the run's global batch (rescaled_argv), behind the check if asked."""
    target = rescaled_argv(restart_argv(config.target), len(hosts), first)
    check = replace(config.check, target=target) if config.check is not None else None
    return replace(config, hosts_from_file=(*hosts, *spares), target=target, check=check)


def node_event(
    fault: NodeFault, restart: int | None, max_restarts: int, resumes: str | None, hosts: Sequence[str],
    joined: Sequence[str] = (),
) -> dict:  # fmt: skip
    """One fault in the log: when, the nodes at fault, what, those left out, and the restart it led to (None:
    none) on which hosts, spares `joined` among them."""
    return {
        "at": now(),
        "nodes": list(fault.nodes),
        "cause": fault.cause,
        "exit": fault.code,
        "left_out": list(fault.silent),
        "restart": restart,
        "max_restarts": max_restarts,
        "resumes_from": resumes,
        "hosts": list(hosts) if restart is not None else None,
        "spares_joined": list(joined) if restart is not None else [],
    }


def too_few_line(answering: int, hosts: int, min_nodes: int, cause: str) -> str:
    """The start of the line that ends a job with fewer answering nodes than --min-nodes."""
    return f"{answering} of {hosts} nodes answer, fewer than --min-nodes {min_nodes}: {cause}; not restarted"


def restart_line(fault: NodeFault, restart: int, max_restarts: int, hosts: Sequence[str], joined: Sequence[str],
                 start: str) -> str:  # fmt: skip
    """The line that says a node fault and the restart it leads to (the spares `joined` in the job)."""
    instead = f", spare {', '.join(joined)} in {'its' if len(joined) == 1 else 'their'} place" if joined else ""
    left = f"{', '.join(fault.silent)} left out{instead}; " if fault.silent else ""
    return (
        f"{fault.cause}: a machine fault; {left}restart {restart} of {max_restarts} on {len(hosts)} node(s) "
        f"({','.join(hosts)}), {start}"
    )


def restarting_nodes(
    first: Plan, config: LaunchConfig, replan: Replan, environ: Mapping[str, str], watch: HeartbeatWatch | None = None
) -> int:
    """Run the head node's commands; after a node fault, while restarts remain and at least --min-nodes hosts
    answer, again on those, from the run's last whole checkpoint; each fault logged and said in one line. With a
    watch, a node whose heartbeats stop for --node-timeout is a node fault too (zerokit.launch.heartbeat)."""
    argv = config.target
    log = log_path(output_dir(argv), Path.cwd())
    events: list[dict] = []
    the_plan, restart = first, 0
    # Under srun, the Slurm job's nodes (no hostfile given); the spares behind the job's hosts (--nnodes).
    config = replace(config, hosts_from_file=(*first.hosts, *first.spares))
    lost = (lambda: watch.silent(config.node_timeout)) if watch is not None else None
    with queued_signals() as received:
        while True:
            restart += 1
            code, supervisor = supervise(the_plan.commands, config.stop_grace, None, received, lost)
            if code == 0 or supervisor.stop_signal is not None or has_final_model(argv):
                return code
            fault = node_fault(supervisor, (*the_plan.hosts, *the_plan.spares), code, config.launcher)
            if fault is None:
                return code
            hosts, spares = next_hosts(the_plan, fault.silent)
            joined = [host for host in hosts if host in the_plan.spares]
            again = restart <= config.max_restarts and len(hosts) >= config.min_nodes
            resumes = resume_point(restart_argv(argv)) if again else None
            events.append(node_event(fault, restart if again else None, config.max_restarts, resumes, hosts, joined))
            kept = write_log(log, events)
            if not again:
                why = end_words(fault, restart, config, len(the_plan.hosts), len(hosts))
                say(f"{why}: {outputs_state(argv)}; {kept}")
                return code
            start = f"from {resumes}" if resumes else "as given"
            say(f"{restart_line(fault, restart, config.max_restarts, hosts, joined, start)}; {kept}")
            again_config = restart_config(config, hosts, spares, len(first.hosts))
            the_plan = replan(again_config, {**environ, restart_log.VARIABLE: str(log)})
            wait_for_port(the_plan.main_address, the_plan.main_port, config.stop_grace + PROBE_SECONDS)


def wait_for_port(address: str, port: int, seconds: float) -> None:
    """Until nothing accepts connections at address:port, at most `seconds`: the stopped job's rendezvous store,
    held by a rank that its node's launch stops within --stop-grace, or the restarted rank 0 could not bind it."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        try:
            socket.create_connection((address, port), timeout=1).close()
        except OSError:
            return
        time.sleep(0.2)


def end_words(fault: NodeFault, restart: int, config: LaunchConfig, hosts: int, answering: int) -> str:
    """Why a node fault ends the job: restarts exhausted, or too few nodes answer."""
    if restart > config.max_restarts:
        who = ", ".join(fault.nodes) or "the job"
        limit = config.max_restarts
        return f"{who} failed again ({fault.cause}); restarts exhausted ({limit} of {limit})"
    return too_few_line(answering, hosts, config.min_nodes, fault.cause)
