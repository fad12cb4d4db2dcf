"""A worker forked inside `parent_answers_stops` starts with Ctrl-C ignored, SIGTERM at its default and no stop
blocked (the stops are blocked while it is forked, so that one reaching it before those handlers waits for them:
issue 61: a pool replacing a worker while terminated sent SIGTERM into the Python handler the child inherited,
which raised inside the fork's callback, and the command hung)."""

from __future__ import annotations

import os
import signal

from zerokit.foundations.pool_signals import parent_answers_stops


def _forked_worker_state() -> tuple[object, object, bool]:
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the worker: report its handlers and mask, then end without Python's clean-up
        blocked = signal.pthread_sigmask(signal.SIG_BLOCK, [])
        os.write(write, f"{signal.getsignal(signal.SIGINT)!r}|{signal.getsignal(signal.SIGTERM)!r}|"
                        f"{signal.SIGTERM in blocked}".encode())  # fmt: skip
        os._exit(0)
    os.close(write)
    with os.fdopen(read) as answer:
        sigint, sigterm, blocked = answer.read().split("|")
    os.waitpid(pid, 0)
    return sigint, sigterm, blocked == "True"


def test_a_worker_forked_inside_ignores_ctrl_c_and_ends_on_sigterm_with_nothing_blocked():
    with parent_answers_stops():
        sigint, sigterm, blocked = _forked_worker_state()
        assert signal.SIGTERM not in signal.pthread_sigmask(signal.SIG_BLOCK, [])  # the parent's mask restored
    assert (sigint, sigterm, blocked) == (repr(signal.SIG_IGN), repr(signal.SIG_DFL), False)


def test_outside_a_fork_keeps_the_handlers_it_inherits():
    sigint, _, blocked = _forked_worker_state()
    assert sigint == repr(signal.getsignal(signal.SIGINT)) and not blocked
