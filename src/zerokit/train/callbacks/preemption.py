"""Preemption: on SIGTERM or SIGUSR1 (Slurm's `--signal`), finish the step, checkpoint, exit to be requeued;
on Ctrl-C (SIGINT) during training the same, exiting 130, and a second Ctrl-C ends the rank at once.

The signal only sets a flag. A signal reaches the ranks at slightly different moments, so they
agree on it before stopping, and at no cost per step: at the end of step N each rank starts an
asynchronous all-reduce (MAX) of its flag over a CPU (gloo) side group, and at the end of step
N+1 it reads the result, which every rank gets the same. So a GPU rank never synchronises with
its device for it, and the collective runs in gloo's thread while step N+1 computes. When the
result says "set", every rank stops at that same step N+1, after the Trainer has written a
checkpoint, and `train` exits with REQUEUE_EXIT_CODE. The stop comes at most one step after the
step during which the signal arrived (seconds, against Slurm's `--signal=B:USR1@120`).
"""

from __future__ import annotations

import os
import signal
import sys

from transformers import TrainerCallback

from zerokit.foundations.errors import REQUEUE_EXIT_CODE

SIGNALS = (signal.SIGTERM, signal.SIGUSR1)
# Ctrl-C: a person is there, so no requeue; the code a shell reports for SIGINT.
INTERRUPT_EXIT_CODE = 128 + signal.SIGINT
# What the ranks agree on, the largest wins: nothing, stop to be requeued, stop because interrupted.
CONTINUE, REQUEUE, INTERRUPT = 0, 1, 2


class PreemptionCallback(TrainerCallback):
    """Installs the signal handlers when built; `preempted` is True once training stopped for a signal."""

    def __init__(self) -> None:
        self.received: int | None = None
        self.wish = CONTINUE  # this rank's: REQUEUE or INTERRUPT once a signal came
        self.preempted = False
        self.exit_code = 0  # once preempted: REQUEUE_EXIT_CODE or INTERRUPT_EXIT_CODE
        self._agreement: FlagAgreement | None = None
        self._sigint_before: object = None
        for sig in SIGNALS:
            signal.signal(sig, self._on_signal)

    def _on_signal(self, signum, _frame) -> None:
        if signum == signal.SIGINT:
            if self.wish == INTERRUPT:  # the second Ctrl-C: now, without the checkpoint, without a traceback
                os.write(2, f"zerokit: SIGINT again: exiting now ({INTERRUPT_EXIT_CODE})\n".encode())
                os._exit(INTERRUPT_EXIT_CODE)
            self.wish = INTERRUPT
        else:
            self.wish = max(self.wish, REQUEUE)
        self.received = signum

    def on_train_begin(self, args, state, control, **kwargs):
        self._agreement = FlagAgreement.for_this_job()  # every rank calls on_train_begin: it may make a group
        # Ctrl-C checkpoints only while there are steps to end; before and after, it is a KeyboardInterrupt
        # (one line from `zerokit`, exit 130).
        self._sigint_before = signal.signal(signal.SIGINT, self._on_signal)
        return control

    def on_step_end(self, args, state, control, **kwargs):
        if self.preempted or self._agreement is None:
            return control
        agreed = self._agreement.exchange(self.wish)
        if agreed == CONTINUE:
            return control
        self.preempted = True
        self.exit_code = INTERRUPT_EXIT_CODE if agreed == INTERRUPT else REQUEUE_EXIT_CODE
        control.should_save = True
        control.should_training_stop = True
        if state.is_world_process_zero:
            name = signal.Signals(self.received).name if self.received else "a signal on another rank"
            why = "interrupted; Ctrl-C again to stop without it" if agreed == INTERRUPT else "requeue"
            print(
                f"zerokit: {name} received: checkpointing at step {state.global_step}, "
                f"then exiting with {self.exit_code} ({why})",
                file=sys.stderr,
                flush=True,
            )
        return control

    def on_train_end(self, args, state, control, **kwargs):
        if self._agreement is not None:
            self._agreement.finish()  # no collective left in flight when the process group goes
            self._agreement = None
        if self._sigint_before is not None:
            signal.signal(signal.SIGINT, self._sigint_before)
            self._sigint_before = None
        return control


class FlagAgreement:
    """The largest of the ranks' flags (0: none), agreed one call late: each call starts a MAX all-reduce and
    reads the last.

    Every rank must call `exchange` equally often (once per step end) and `finish` once at the end.
    Alone (no process group, or one rank) a set flag is seen at once.
    """

    def __init__(self, group) -> None:
        self.group = group  # None: this rank alone
        self._pending = None  # (work, tensor) of the all-reduce started by the last call

    @classmethod
    def for_this_job(cls) -> FlagAgreement:
        import torch.distributed as dist

        if not (dist.is_available() and dist.is_initialized()) or dist.get_world_size() == 1:
            return cls(None)
        # A gloo side group: the flag stays in host memory (never on a GPU's stream), and its
        # collective never queues behind or ahead of DeepSpeed's on the default group.
        return cls(dist.new_group(backend="gloo"))

    def exchange(self, flag: int) -> int:
        """The agreed flag of the previous call (0 on the first); starts this call's agreement."""
        if self.group is None:
            return flag
        import torch
        import torch.distributed as dist

        agreed = self._collect()
        tensor = torch.tensor([int(flag)], dtype=torch.int32)
        self._pending = (dist.all_reduce(tensor, op=dist.ReduceOp.MAX, group=self.group, async_op=True), tensor)
        return agreed

    def finish(self) -> None:
        if self.group is not None:
            self._collect()

    def _collect(self) -> int:
        if self._pending is None:
            return 0
        work, tensor = self._pending
        self._pending = None
        work.wait()  # done long ago in the common case: it ran during the step
        return int(tensor.item())  # a CPU tensor: no device synchronisation


def any_rank(flag) -> bool:
    """Whether a one-element flag tensor (on this rank's device) is set on any rank: one all-reduce.

    Every rank must call it at the same step; outside a process group it is this rank's flag.
    """
    import torch
    import torch.distributed as dist

    flag = flag.to(torch.int32).reshape(1)
    if dist.is_available() and dist.is_initialized():
        dist.all_reduce(flag, op=dist.ReduceOp.MAX)
    return bool(flag.item())


# Set to 1 by `bench --preemption-cost` only, to time train without the callback (its cost alone).
# Without the callback a signal ends the rank at once, with no checkpoint: never for real jobs.
BENCH_WITHOUT_VARIABLE = "ZEROKIT_BENCH_WITHOUT_PREEMPTION"
