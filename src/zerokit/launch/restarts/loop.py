"""`launch --max-restarts N`: the one restart loop, after torchelastic's agent (SimpleElasticAgent._invoke_run):
run the attempt under a Supervisor -> its end read as a fault, or not -> the fault recorded in the log and said in
one line -> the job planned again -> go again, while restarts remain. Written once; what differs between one
node's ranks and a job of several nodes started from the head comes in as two small strategies:

- a `Sight`, how a fault is seen: one node's rank ended by a machine fault or the stall watch
  (zerokit.launch.restarts.one_node), or at the head a node's launch that ended so, or whose heartbeats stopped, and
  the hosts that no longer answer, over ssh or in Slurm's view (zerokit.launch.restarts.head_node);
- a `Placement`, which hosts come next and how the job starts again there: the same ones, the same commands
  (one_node), or those that answer, a spare in the place of each host left out, the job planned again on
  them (head_node).

The job is restarted from its record (zerokit.launch.job.restarted: train with `--resume auto`); what restarts and
what never does: zerokit.launch.watch.exits. A stop signal to launch, a run whose final model is written, and an end
that is no fault (a user error, a diverged loss) never restart.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from zerokit.foundations import restart_log
from zerokit.launch.command import Command
from zerokit.launch.job import Job, has_final_model, outputs_state, restarted, resumes_from
from zerokit.launch.watch.stall import StallWatch
from zerokit.launch.watch.supervisor import Supervisor, queued_signals, say, supervise

LOG_NAME = "launch-restarts.json"


@dataclass(frozen=True)
class Attempt:
    """One try of the job: the commands it runs, the job they run, the hosts it runs on and the spares behind them
    (the plan's: those a head-node restart chooses among)."""

    commands: tuple[Command, ...]
    job: Job
    hosts: tuple[str, ...] = ()
    spares: tuple[str, ...] = ()


@dataclass(frozen=True)
class Next:
    """Where a restart runs: its hosts, the spares still free, those of them that joined, the hosts left out."""

    hosts: tuple[str, ...]
    spares: tuple[str, ...] = ()
    joined: tuple[str, ...] = ()
    left_out: Mapping[str, str] | None = None  # host -> why it does not answer


class Fault(Protocol):
    """A fault that ended an attempt, as the loop logs and says it."""

    code: int  # launch's exit status for it
    cause: str  # what ended, in words

    @property
    def who(self) -> str:
        """Who failed again, when restarts are exhausted."""
        ...

    @property
    def said(self) -> str:
        """What happened, as the restart line starts."""
        ...

    def event(self, restart: int | None, max_restarts: int, resumes: str | None, where: Next) -> dict:
        """Its entry in the log (restart None: not restarted)."""
        ...


class Sight(Protocol):
    """How a fault is seen: the watches kept while an attempt runs, and its end read."""

    stall: StallWatch | None  # no rank's progress for a while ends the ranks
    lost: Callable[[], Mapping[str, float]] | None  # hosts whose heartbeats stopped -> seconds silent

    def fault(self, supervisor: Supervisor, code: int, attempt: Attempt) -> Fault | None:
        """The fault that ended the attempt, None for an end that does not restart."""
        ...


class Placement(Protocol):
    """Which hosts come next, and how the job starts again on them."""

    def after(self, attempt: Attempt, fault: Fault) -> Next: ...

    def too_few(self, attempt: Attempt, where: Next, fault: Fault) -> str | None:
        """Why the job cannot go on there (in a line), None when it can."""
        ...

    def words(self, where: Next) -> tuple[str, str]:
        """How the restart line names where: before `restart N of M`, and after it."""
        ...

    def start(self, attempt: Attempt, job: Job, where: Next, log: Path) -> Attempt:
        """The next attempt: job on where, its ranks told of the log."""
        ...


def restarting(first: Attempt, sight: Sight, placement: Placement, max_restarts: int, stop_grace: float) -> int:
    """Run the attempt; after a fault, while restarts remain and enough hosts answer, again from the run's last whole
    checkpoint, each fault logged (restart_log) and said in one line. The exit status of the last attempt."""
    log = log_path(first.job.output_dir, Path.cwd())
    events: list[dict] = []
    attempt, restart = first, 0
    with queued_signals() as received:
        while True:
            restart += 1
            code, supervisor = supervise(attempt.commands, attempt.job, stop_grace, sight.stall, received, sight.lost)
            if code == 0 or not max_restarts or supervisor.stop_signal is not None or has_final_model(attempt.job):
                return code
            fault = sight.fault(supervisor, code, attempt)
            if fault is None:
                return code
            where = placement.after(attempt, fault)
            too_few = placement.too_few(attempt, where, fault)
            again = restart <= max_restarts and too_few is None
            job = restarted(first.job, len(where.hosts), len(first.hosts))  # from the job as first given
            resumes = resumes_from(job) if again else None
            events.append(fault.event(restart if again else None, max_restarts, resumes, where))
            kept = write_log(log, events)
            if not again:
                limit = max_restarts
                why = f"{fault.who} failed again ({fault.cause}); restarts exhausted ({limit} of {limit})"
                say(f"{too_few if restart <= max_restarts else why}: {outputs_state(attempt.job)}; {kept}")
                return code
            start = f"from {resumes}" if resumes else "as given"
            if job.memory_checkpoints:
                start = f"from the newest whole copy in the nodes' memory, else {resumes or 'as given'}"
            before, after = placement.words(where)
            say(f"{fault.said}: a machine fault; {before}restart {restart} of {max_restarts}{after}, {start}; {kept}")
            if sight.stall is not None:
                sight.stall.reset()
            attempt = placement.start(attempt, job, where, log)


def write_log(path: Path, events: list[dict]) -> str:
    """Write the log; how the line names it (a log that cannot be written is said, and the job goes on)."""
    try:
        restart_log.write_events(path, events)
    except OSError as err:
        return f"faults not logged to {path} ({err.strerror})"
    return f"faults logged in {path}"


def log_path(output_dir: str | None, workdir: Path) -> Path:
    """Where launch writes its log of faults and restarts: beside the command's output folder (`runs/x` ->
    `runs/x.launch-restarts.json`; the folder itself is the command's, one writer at a time), else in launch's
    working folder (where a job script's log is, as for a stall's stacks)."""
    if output_dir is None:
        return workdir / LOG_NAME
    folder = (workdir / output_dir).resolve()
    return folder.with_name(f"{folder.name}.{LOG_NAME}")
