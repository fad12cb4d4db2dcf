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


# The part of a run's end that failed, once training is done, and its exit code: a user (or a job script) can tell
# from the code alone whether the model was kept. None of them restarts under launch (zerokit.launch.watch.exits).
END_OF_RUN_EXIT_CODES = {"final save": 3, "evaluation": 4, "adapter merge": 5, "run record": 6}


class EndOfRunFailure(RunFailure):
    """A part of a run's end failed after training (see END_OF_RUN_EXIT_CODES): its line says what was kept."""

    def __init__(self, part: str, message: str) -> None:
        super().__init__(message)
        self.exit_code = END_OF_RUN_EXIT_CODES[part]
