"""Preemption: on SIGTERM or SIGUSR1 (Slurm's `--signal`), finish the step, checkpoint, exit to be requeued.

The signal only sets a flag; at the end of each step the ranks agree (an all-reduce of the
flag, since a signal reaches the ranks at slightly different moments) and all stop at the same
step, after the Trainer has written a checkpoint. `train` then exits with REQUEUE_EXIT_CODE.
"""

from __future__ import annotations

import signal
import sys

from transformers import TrainerCallback

# The exit code of `train` after a preemption checkpoint. The one place it is defined: the job
# scripts (scripts/slurm/*.sbatch, REQUEUE_EXIT_CODE) requeue the job when train exits with it.
REQUEUE_EXIT_CODE = 85
SIGNALS = (signal.SIGTERM, signal.SIGUSR1)


class PreemptionCallback(TrainerCallback):
    """Installs the signal handlers when built; `preempted` is True once training stopped for a signal."""

    def __init__(self) -> None:
        self.received: int | None = None
        self.preempted = False
        for sig in SIGNALS:
            signal.signal(sig, self._on_signal)

    def _on_signal(self, signum, _frame) -> None:
        self.received = signum

    def on_step_end(self, args, state, control, **kwargs):
        if self.preempted or not self._any_rank_signalled(args):
            return control
        self.preempted = True
        control.should_save = True
        control.should_training_stop = True
        if state.is_world_process_zero:
            name = signal.Signals(self.received).name if self.received else "a signal on another rank"
            print(
                f"zerokit: {name} received: checkpointing at step {state.global_step}, "
                f"then exiting with {REQUEUE_EXIT_CODE} (requeue)",
                file=sys.stderr,
                flush=True,
            )
        return control

    def _any_rank_signalled(self, args) -> bool:
        import torch
        import torch.distributed as dist

        flag = self.received is not None
        if not (dist.is_available() and dist.is_initialized()) or dist.get_world_size() == 1:
            return flag
        return any_rank(torch.tensor([int(flag)], device=args.device))


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
