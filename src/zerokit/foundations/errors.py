"""The exceptions the CLI prints as one line (no traceback), with their exit codes; and train's exit code after a
preemption checkpoint, which the job scripts requeue on."""

# train exits so once its preemption checkpoint is written (zerokit.train.callbacks.preemption); the job scripts
# (scripts/slurm/*.sbatch, REQUEUE_EXIT_CODE) requeue the job on it, launch lets the other ranks end on their own.
REQUEUE_EXIT_CODE = 85


class OneLineError(Exception):
    """A fault the command names in one line, which says what is wrong and how to fix it."""

    exit_code = 1
    every_rank = False  # True: raised alike on every rank, so only rank 0 prints it


class UserError(OneLineError):
    """Bad input from the user. Exit code 2."""

    exit_code = 2


class RunFailure(OneLineError):
    """A fault during a run that was not bad input (a diverged loss, a full disk, absent peers). Exit code 1."""
