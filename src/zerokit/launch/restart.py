"""`launch --max-restarts N`: the ranks of a job on one node, ended by a machine fault, start again from the
run's last whole checkpoint, at most N times (a job of several nodes, from the head node:
zerokit.launch.head_restart). Pure parts: which ends restart, the command a restart runs, where the log of
faults and restarts goes; zerokit.launch.supervisor runs the ranks again.

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
from collections.abc import Sequence
from pathlib import Path

from zerokit.launch.rank.progress import STALL_EXIT_CODE

MACHINE_FAULT_SIGNALS = frozenset(
    {signal.SIGKILL, signal.SIGSEGV, signal.SIGBUS, signal.SIGILL, signal.SIGFPE, signal.SIGABRT}
)
LOG_NAME = "launch-restarts.json"
TRAIN = ("-m", "zerokit", "train")  # how a launch target runs zerokit's train (zerokit.launch.config)
ACCUMULATION_FLAGS = ("--gradient_accumulation_steps", "--gradient-accumulation-steps")  # as HF's parser reads it


def is_machine_fault(returncode: int) -> bool:
    """Whether a rank that ended with returncode (Popen's: -N for signal N) restarts (see the module's docstring)."""
    signum = -returncode if returncode < 0 else returncode - 128 if returncode > 128 else 0
    return signum in MACHINE_FAULT_SIGNALS or returncode == STALL_EXIT_CODE


def restart_argv(argv: Sequence[str]) -> tuple[str, ...]:
    """The command a restarted rank runs: zerokit's train resumes its newest whole checkpoint (`--resume auto`,
    or from step 0 when there is none), unless its command line already says what to resume; any other command
    runs again as given (a script that resumes reads its own folder)."""
    words = tuple(argv)
    start = train_flags_start(words)
    if start is None or any(word == "--resume" or word.startswith("--resume=") for word in words[start:]):
        return words
    return (*words, "--resume", "auto")


def train_flags_start(words: Sequence[str]) -> int | None:
    """Where train's own flags begin in a launch target's words; None for any other command."""
    return next((i + len(TRAIN) for i in range(len(words)) if tuple(words[i : i + len(TRAIN)]) == TRAIN), None)


def rescaled_argv(argv: Sequence[str], nodes: int, first_nodes: int) -> tuple[str, ...]:
    """The command of a restart on `nodes` nodes of a job first started on `first_nodes` (a head-node restart
    that left hosts out): train's --gradient_accumulation_steps A, where given, becomes A x first_nodes / nodes,
    which makes the run's global batch on fewer ranks, as train sets it where none is given
    (zerokit.train.global_batch); kept where that is no whole number (train then names the sizes that would)."""
    words = list(argv)
    start = train_flags_start(words)
    for i in range(len(words) if start is None else start, len(words)):
        name, equals, value = words[i].partition("=")
        if name not in ACCUMULATION_FLAGS:
            continue
        at = i if equals else i + 1
        given = value if equals else (words[at] if at < len(words) else "")
        if given.isdigit() and int(given) * first_nodes % nodes == 0:
            kept = str(int(given) * first_nodes // nodes)
            words[at] = f"{name}={kept}" if equals else kept
    return tuple(words)


def log_path(output_dir: str | None, workdir: Path) -> Path:
    """Where launch writes its log of faults and restarts: beside the command's output folder (`runs/x` ->
    `runs/x.launch-restarts.json`; the folder itself is the command's, one writer at a time), else in launch's
    working folder (where a job script's log is, as for a stall's stacks)."""
    if output_dir is None:
        return workdir / LOG_NAME
    folder = (workdir / output_dir).resolve()
    return folder.with_name(f"{folder.name}.{LOG_NAME}")
