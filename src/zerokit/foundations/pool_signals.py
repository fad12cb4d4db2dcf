"""Ctrl-C and SIGTERM in a command whose work runs in a pool of forked workers (datasets' `map(num_proc=N)`).

A terminal's Ctrl-C goes to every process of its foreground group, and a scheduler's SIGTERM (scancel, a
job's time limit) often to every process of the job: each pool worker then raised its own KeyboardInterrupt,
printed its traceback and left the pool to be torn down around it (`prepare tokenize`: four tracebacks, exit 1).
Inside `parent_answers_stops()`, a forked worker ignores SIGINT and dies quietly on SIGTERM (its default),
so the command alone answers: the parent's KeyboardInterrupt (or `Terminated`, for SIGTERM) unwinds through the
pool, whose exit terminates the workers, and the command line says it in one line with 128 + the signal.
"""

from __future__ import annotations

import contextlib
import os
import signal
import threading
from collections.abc import Iterator
from types import FrameType


class Terminated(KeyboardInterrupt):
    """SIGTERM, raised as Ctrl-C is, so that whatever cleans up on a KeyboardInterrupt cleans up on it too."""

    signum = signal.SIGTERM


_quiet_workers = False  # read in each forked child: inside parent_answers_stops
_STOPS = {signal.SIGINT, signal.SIGTERM}
_forking = threading.local()  # the forking thread's signal mask, while it forks a quiet worker


def _before_fork() -> None:
    """A worker forked inside parent_answers_stops starts with the stops blocked: one that reaches it before its
    handlers are set waits for them (a pool replacing a worker as it is terminated sent SIGTERM into the
    child's Python handler, inherited from this process, which raised it inside the fork's callback)."""
    _forking.mask = signal.pthread_sigmask(signal.SIG_BLOCK, _STOPS) if _quiet_workers else None


def _after_fork_in_parent() -> None:
    if _forking.mask is not None:
        signal.pthread_sigmask(signal.SIG_SETMASK, _forking.mask)


def _after_fork_in_child() -> None:
    if _forking.mask is not None:
        signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent answers Ctrl-C for the whole command
        signal.signal(signal.SIGTERM, signal.SIG_DFL)  # the pool's terminate(), or a scheduler's: no traceback
        signal.pthread_sigmask(signal.SIG_SETMASK, _forking.mask)


os.register_at_fork(before=_before_fork, after_in_parent=_after_fork_in_parent, after_in_child=_after_fork_in_child)


_stopped_by: int | None = None  # the stop signal that reached this process inside parent_answers_stops


def _raise_stop(signum: int, frame: FrameType | None) -> None:
    global _stopped_by
    _stopped_by = signum
    raise Terminated if signum == signal.SIGTERM else KeyboardInterrupt


@contextlib.contextmanager
def parent_answers_stops() -> Iterator[None]:
    """Within: workers forked leave Ctrl-C and SIGTERM to this process, which raises KeyboardInterrupt or
    Terminated (see the module's docstring). What a library's clean-up raises while it unwinds from one
    (datasets' map waits on its busy workers, times out and raises TimeoutError) is the stop still."""
    global _quiet_workers, _stopped_by
    previous = {signum: signal.signal(signum, _raise_stop) for signum in (signal.SIGINT, signal.SIGTERM)}
    _quiet_workers, _stopped_by = True, None
    try:
        yield
    except Exception:
        if _stopped_by is None:
            raise
        raise (Terminated() if _stopped_by == signal.SIGTERM else KeyboardInterrupt()) from None
    finally:
        _quiet_workers = False
        for signum, handler in previous.items():
            signal.signal(signum, handler)


def stop_signal(stop: KeyboardInterrupt) -> signal.Signals:
    """The signal a KeyboardInterrupt stands for: SIGTERM for Terminated, else SIGINT."""
    return signal.Signals(getattr(stop, "signum", signal.SIGINT))
