"""`launch --max-restarts N` from the head node (`--launcher pdsh|mpirun|mpiexec --hostfile H`, or `--launcher srun`
in a Slurm job's batch step): when a node's ranks die or a node stops answering, the job starts again on the hosts
that answer, from the run's last whole checkpoint (train with `--resume auto`, as on one node), while at least
`--min-nodes` of them do. The restart loop's two strategies for it (zerokit.launch.restarts.loop): how a fault is
seen (NodeExits), and which hosts come next (Survivors).

- A node's end, seen: under pdsh and srun, one command per host (zerokit.launch.plan.head_commands: a pdsh, a
  step of one task), so that launch sees which node's launch ended, and when: with its ranks' machine fault (137
  for a SIGKILL, through ssh and pdsh), or with ssh's 255 (the connection lost: the node died, or it left ssh's
  keepalives unanswered: zerokit.launch.head). The other hosts' commands are stopped as any failed rank's peers
  are (the supervisor); once its pdsh is gone, each node's launch stops its ranks within `--stop-grace` (its
  stdin closes), and a stopped srun has Slurm end its step's tasks; a restart starts once nothing listens at its
  main address and port (the stopped job's store). An MPI launcher ends every rank itself when one dies
  (OpenMPI's mpirun: 137 for a rank SIGKILLed, 205 when it lost a node's daemon).
- A node cut off, seen: each node's launch sends the head's a heartbeat every second (zerokit.launch.watch.heartbeat);
  a node silent for --node-timeout has its command here ended, which then fails as a node's end does.
- Which hosts answer: after a failed end, every host probed at once, within PROBE_SECONDS
  (zerokit.launch.restarts.probe: `ssh HOST true`; in a Slurm job, Slurm's view of the node and a step of `true` on
  it). A host that does not answer is left out, and the job starts again on the others, in the hostfile's (or the
  Slurm job's) order (the first is the main address, unless --master-addr names one). With --nnodes N, the job runs
  on the first N hosts and the rest are spares, probed too: one that answers takes the place of each host left out
  (next_hosts).
- What restarts: a node fault, that is a command ended by a machine fault or ssh's 255, or any failed end
  after which a host does not answer (mpirun's lost daemon; a node's peers that failed in their collectives
  before its own end was seen). A stop signal to launch (preemption, Ctrl-C), a run whose final model is
  written, and a failed end after which every host answers and no node's launch died of a machine fault (a
  user error, a diverged loss) never restart.
- Each fault is logged with the nodes at fault, those left out and the hosts the restart runs on, in the log
  of one node's restarts (zerokit.launch.restarts.loop.log_path), which a restarted train copies into zerokit-run.json.
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
from zerokit.launch.job import Job
from zerokit.launch.plan import Plan
from zerokit.launch.restarts.loop import Attempt, Next
from zerokit.launch.restarts.probe import PROBE_SECONDS
from zerokit.launch.watch.exits import is_machine_fault
from zerokit.launch.watch.supervisor import Supervisor, exit_code

SSH_LOST = 255  # ssh's status when it could not connect, or lost its connection
# Makes the plan of the job on other hosts: plan.plan, with this launch's cluster, interfaces and ports.
Replan = Callable[[LaunchConfig, Mapping[str, str]], Plan]
# The hosts that do not answer -> why (zerokit.launch.restarts.probe: over ssh, or in Slurm's view).
Probe = Callable[[Sequence[str]], dict[str, str]]


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

    @property
    def who(self) -> str:
        return ", ".join(self.nodes) or "the job"

    @property
    def said(self) -> str:
        return self.cause

    def event(self, restart: int | None, max_restarts: int, resumes: str | None, where: Next) -> dict:
        """One fault in the log: when, the nodes at fault, what, those left out, and the restart it led to (None:
        none) on which hosts, the spares that joined among them."""
        return {
            "at": now(),
            "nodes": list(self.nodes),
            "cause": self.cause,
            "exit": self.code,
            "left_out": list(self.silent),
            "restart": restart,
            "max_restarts": max_restarts,
            "resumes_from": resumes,
            "hosts": list(where.hosts) if restart is not None else None,
            "spares_joined": list(where.joined) if restart is not None else [],
        }


def is_node_fault(returncode: int) -> bool:
    """Whether a head-node command's end (Popen's return code) says its node failed: its ranks' machine fault,
    or ssh's lost connection."""
    return is_machine_fault(returncode) or exit_code(returncode) == SSH_LOST


@dataclass(frozen=True)
class NodeExits:
    """A fault seen from the head: a node's launch that ended by a machine fault or lost its connection, or whose
    heartbeats stopped (`lost`: its command is ended, then seen so), and the hosts that no longer answer (`probe`).
    None when no node is to blame."""

    probe: Probe
    lost: Callable[[], Mapping[str, float]] | None = None
    stall = None  # each node's launch watches its own ranks

    def fault(self, supervisor: Supervisor, code: int, attempt: Attempt) -> NodeFault | None:
        ended = [rank for rank in supervisor.ranks if not rank.stopped and is_node_fault(rank.process.returncode)]
        silent = self.probe((*attempt.hosts, *attempt.spares))
        if not ended and not silent:
            return None
        named = ended or [rank for rank in (supervisor.failure,) if rank is not None]
        said = [f"{rank.label} {supervisor.ended_how(rank)}" for rank in named]
        said += [f"{host} does not answer ({why})" for host, why in silent.items()]
        failed = tuple(rank.host for rank in ended if rank.host)
        return NodeFault(failed, silent, code, "; ".join(said))


def next_hosts(hosts: Sequence[str], spares: Sequence[str], left_out: Mapping[str, str]) -> Next:
    """The hosts a restart runs on, and the spares still free: the job's hosts that answer, in their order, then
    a spare that answers in the place of each host left out (--nnodes); without one the job shrinks."""
    kept = tuple(host for host in hosts if host not in left_out)
    free = tuple(host for host in spares if host not in left_out)
    taken = free[: len(hosts) - len(kept)]
    return Next((*kept, *taken), free[len(taken) :], taken, left_out)


@dataclass(frozen=True)
class Survivors:
    """The job starts again on the hosts that answer, a spare in the place of each host left out, planned again on
    them (`replan`, with the launch's variables `environ`), while at least `min_nodes` answer."""

    config: LaunchConfig
    replan: Replan
    environ: Mapping[str, str]

    def after(self, attempt: Attempt, fault: NodeFault) -> Next:
        return next_hosts(attempt.hosts, attempt.spares, fault.silent)

    def too_few(self, attempt: Attempt, where: Next, fault: NodeFault) -> str | None:
        if len(where.hosts) >= self.config.min_nodes:
            return None
        return too_few_line(len(where.hosts), len(attempt.hosts), self.config.min_nodes, fault.cause)

    def words(self, where: Next) -> tuple[str, str]:
        joined = where.joined
        instead = f", spare {', '.join(joined)} in {'its' if len(joined) == 1 else 'their'} place" if joined else ""
        left = f"{', '.join(where.left_out)} left out{instead}; " if where.left_out else ""
        return left, f" on {len(where.hosts)} node(s) ({','.join(where.hosts)})"

    def start(self, attempt: Attempt, job: Job, where: Next, log: Path) -> Attempt:
        again = restart_config(self.config, job, where.hosts, where.spares)
        the_plan = self.replan(again, {**self.environ, restart_log.VARIABLE: str(log)})
        wait_for_port(the_plan.main_address, the_plan.main_port, self.config.stop_grace + PROBE_SECONDS)
        return Attempt(the_plan.commands, job, the_plan.hosts, the_plan.spares)


def restart_config(config: LaunchConfig, job: Job, hosts: tuple[str, ...], spares: tuple[str, ...]) -> LaunchConfig:
    """The config of the job started again on hosts, the spares left behind them, behind the check if asked."""
    check = replace(config.check, target=job.argv) if config.check is not None else None
    return replace(config, hosts_from_file=(*hosts, *spares), target=job.argv, check=check)


def too_few_line(answering: int, hosts: int, min_nodes: int, cause: str) -> str:
    """The start of the line that ends a job with fewer answering nodes than --min-nodes."""
    return f"{answering} of {hosts} nodes answer, fewer than --min-nodes {min_nodes}: {cause}; not restarted"


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
