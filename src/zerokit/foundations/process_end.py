"""End a process that has done its work as Python would, up to the interpreter's finalization, which is skipped.

Why (issue 32; torch 2.13 CPU, gloo, Python 3.11): a rank that had trained and written its model sometimes
died at exit with `terminate called without an active exception` (SIGABRT, exit 134). The core dump of such
a rank: the main thread in Py_FinalizeEx (its last garbage collection), and a gloo worker thread
(c10d::ProcessGroupGloo::runLoop) destroying a finished collective (AsyncAllgatherWork) whose tensors still
had Python objects. Their decref takes the GIL, and during finalization Python ends any other thread that
asks for it with pthread_exit; the forced unwinding meets the noexcept destructor: std::terminate. Upstream,
torch does not stop its threads before finalization (pytorch/pytorch PR 179291 proposed an atexit
destroy_process_group, abandoned); a barrier and destroy_process_group after the script did not stop the
aborts either (issue 32's measurement). Any native thread that needs the GIL late can do the same.

So, once the work is done: stop and wait for the non-daemon threads, run the atexit handlers (both as
Python's exit does), flush Python's and C's buffered output, and leave with os._exit. Nothing of the interpreter
is torn down while another thread may still run native code.

The same deadlock comes earlier if what holds a process group is freed before end_process (issue 61): a rank
of bench's plain HF run wrote its model and never ended. When `main()` returned, its frame freed the Trainer's
DDP model; the Reducer's ProcessGroupGloo destructor, on the main thread with the GIL held, waited on the group's
work mutex, while a gloo worker thread that held it, finishing an allgather, waited for the GIL to free a
tensor. So a rank hands what holds its process group (the Trainer, a DeepSpeed engine, a DDP model) to
`keep_until_exit`: it is never freed, and os._exit ends the process with it.
"""

from __future__ import annotations

import atexit
import contextlib
import ctypes
import os
import sys
import threading
from typing import NoReturn

_KEPT: list[object] = []  # freed by nobody: the process ends with them (keep_until_exit)


def keep_until_exit(*objects: object) -> None:
    """Hold `objects` until the process ends, so that no destructor of a process group runs under the GIL.

    Call it where a rank builds what holds a process group (see the module's docstring); the rank must then
    end through end_process, which leaves without freeing them.
    """
    _KEPT.extend(objects)


def end_process(code: int) -> NoReturn:
    """Exit with `code` after what a normal exit does before finalization (see the module's docstring)."""
    # As Python's exit: threading's own exit callbacks first (they tell concurrent.futures' worker threads,
    # which torch.compile's inductor starts, to stop: a plain join of those would wait forever), then a join of
    # every non-daemon thread. threading._shutdown is what the interpreter calls for both.
    threading._shutdown()  # type: ignore[attr-defined]
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        if stream is not None:
            with contextlib.suppress(OSError, ValueError):  # a closed pipe or stream: nothing to write to
                stream.flush()
    ctypes.CDLL(None).fflush(None)  # C's stdio buffers (native code's printf into a pipe)
    os._exit(code)


def exit_status(stop: SystemExit) -> int:
    """The status Python gives a SystemExit: 0 for None, the int, else 1 after printing the message."""
    if stop.code is None:
        return 0
    if isinstance(stop.code, int):
        return stop.code
    print(stop.code, file=sys.stderr)
    return 1
