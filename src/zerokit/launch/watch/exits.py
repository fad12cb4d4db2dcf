"""Which ends of a rank are machine faults: under `launch --max-restarts N` those start the job again from the run's
last whole checkpoint, at most N times (the loop: zerokit.launch.restarts.loop; the command a restart runs:
zerokit.launch.job.restarted). A pure table of exit statuses, which the supervisor reads too.

Which ends restart (is_machine_fault), and why: a rank killed by SIGKILL (the kernel's OOM killer, a node's
health agent), SIGSEGV, SIGBUS (a bad memory page, a file cut from under an mmap), SIGILL, SIGFPE or SIGABRT
(a CUDA or NCCL error aborts the process), as Popen reports it (-N) or as a shell or container runtime does
(128+N); and a stall (launch's stall watch fired, or a rank's own watch exited 124). None of these is the
job's own doing, and another try on the same node can pass.

What never restarts: 0; 1 (RunFailure: a diverged loss, a full disk; an unexpected exception: the same
code fails the same way again); 2 (UserError: bad input); 85 (preempted: the scheduler requeues the job);
130 (Ctrl-C); 126 and 127 (a command not executable or not found); a rank ended by a stop signal (SIGTERM,
SIGINT, SIGHUP, SIGQUIT: someone stopped it); a stop signal to launch itself; and any end after which the
final model is in the output folder (the run finished: `--resume auto` would only refuse it).
"""

from __future__ import annotations

import signal

from zerokit.launch.rank.progress import STALL_EXIT_CODE

MACHINE_FAULT_SIGNALS = frozenset(
    {signal.SIGKILL, signal.SIGSEGV, signal.SIGBUS, signal.SIGILL, signal.SIGFPE, signal.SIGABRT}
)


def is_machine_fault(returncode: int) -> bool:
    """Whether a rank that ended with returncode (Popen's: -N for signal N) restarts (see the module's docstring)."""
    signum = -returncode if returncode < 0 else returncode - 128 if returncode > 128 else 0
    return signum in MACHINE_FAULT_SIGNALS or returncode == STALL_EXIT_CODE
