"""The restart loop's strategies for the ranks of one node (`launch --nproc-per-node K --max-restarts N`,
zerokit.launch.restarts.loop): a fault is a rank ended by a machine fault, or the stall watch's stall, as the
Supervisor saw the ranks end; the job starts again on the same node, its commands as they were but for the job's
words (train resumes) and the log's name."""

from __future__ import annotations

import socket
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from pathlib import Path

from zerokit.foundations import restart_log
from zerokit.image.provenance import now
from zerokit.launch.job import Job
from zerokit.launch.rank.progress import STALL_EXIT_CODE
from zerokit.launch.restarts.loop import Attempt, Next
from zerokit.launch.watch.exits import is_machine_fault
from zerokit.launch.watch.stall import StallWatch
from zerokit.launch.watch.supervisor import Supervisor, exit_code


@dataclass(frozen=True)
class RankFault:
    """A machine fault that ended the ranks (zerokit.launch.watch.exits): who, the exit status, and how to say it."""

    who: str  # "rank 1 (local 1)", or "the ranks" for a stall
    rank: str | None  # its global rank; None for a stall
    code: int  # launch's exit status for it
    cause: str  # "was killed by SIGKILL (exit 137)", the OOM killer's words, or the stall's line

    @property
    def said(self) -> str:
        return f"{self.who} {self.cause}"

    def event(self, restart: int | None, max_restarts: int, resumes: str | None, where: Next) -> dict:
        """One fault in the log: when, where, what, and the restart it led to (None: restarts exhausted)."""
        return {
            "at": now(),
            "node": socket.gethostname(),
            "rank": self.rank,
            "cause": self.cause,
            "exit": self.code,
            "restart": restart,
            "max_restarts": max_restarts,
            "resumes_from": resumes,
        }


@dataclass(frozen=True)
class RankExits:
    """A fault seen on this node: a rank that died of a machine fault (the first to fail), or the stall watch's
    stall; None where launch got a stop signal."""

    stall: StallWatch | None = None
    lost: Callable[[], Mapping[str, float]] | None = None

    def fault(self, supervisor: Supervisor, code: int, attempt: Attempt) -> RankFault | None:
        if supervisor.stop_signal is not None:
            return None
        failed = supervisor.failure
        if failed is not None and is_machine_fault(failed.process.returncode):
            code = exit_code(failed.process.returncode)
            return RankFault(failed.label, failed.rank, code, supervisor.ended_how(failed))
        if failed is None and supervisor.stalled is not None:
            return RankFault("the ranks", None, STALL_EXIT_CODE, supervisor.stalled)
        return None


class SameHosts:
    """The job starts again where it ran: the same commands, running the restarted job, told of the log."""

    def after(self, attempt: Attempt, fault: RankFault) -> Next:
        return Next(attempt.hosts, attempt.spares)

    def too_few(self, attempt: Attempt, where: Next, fault: RankFault) -> str | None:
        return None

    def words(self, where: Next) -> tuple[str, str]:
        return "", ""

    def start(self, attempt: Attempt, job: Job, where: Next, log: Path) -> Attempt:
        commands = tuple(
            replace(c, argv=rerun(c.argv, attempt.job, job), env={**c.env, restart_log.VARIABLE: str(log)})
            for c in attempt.commands
        )
        return replace(attempt, commands=commands, job=job)


def rerun(argv: tuple[str, ...], was: Job, job: Job) -> tuple[str, ...]:
    """A command that ran `was`'s words last (the job, or the health check in front of it) running job's."""
    if argv[len(argv) - len(was.argv) :] != was.argv:
        return argv
    return (*argv[: len(argv) - len(was.argv)], *job.argv)
