"""`launch --max-restarts N`: a job ended by a machine fault starts again from the run's last whole checkpoint, at
most N times (the loop: zerokit.launch.restart_loop; the command a restart runs: zerokit.launch.job.restarted).
Pure parts: which ends restart, and where the log of faults and restarts goes.

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
from pathlib import Path

from zerokit.launch.rank.progress import STALL_EXIT_CODE

MACHINE_FAULT_SIGNALS = frozenset(
    {signal.SIGKILL, signal.SIGSEGV, signal.SIGBUS, signal.SIGILL, signal.SIGFPE, signal.SIGABRT}
)
LOG_NAME = "launch-restarts.json"


def is_machine_fault(returncode: int) -> bool:
    """Whether a rank that ended with returncode (Popen's: -N for signal N) restarts (see the module's docstring)."""
    signum = -returncode if returncode < 0 else returncode - 128 if returncode > 128 else 0
    return signum in MACHINE_FAULT_SIGNALS or returncode == STALL_EXIT_CODE


def log_path(output_dir: str | None, workdir: Path) -> Path:
    """Where launch writes its log of faults and restarts: beside the command's output folder (`runs/x` ->
    `runs/x.launch-restarts.json`; the folder itself is the command's, one writer at a time), else in launch's
    working folder (where a job script's log is, as for a stall's stacks)."""
    if output_dir is None:
        return workdir / LOG_NAME
    folder = (workdir / output_dir).resolve()
    return folder.with_name(f"{folder.name}.{LOG_NAME}")
