"""The exceptions the CLI prints as one line (no traceback), with their exit codes."""


class UserError(Exception):
    """Bad input from the user. The message says what is wrong and how to fix it. Exit code 2."""

    exit_code = 2
    every_rank = False  # True: raised alike on every rank, so only rank 0 prints it


class RunFailure(UserError):
    """A fault during a run that was not bad input (a diverged loss, a full disk). Exit code 1."""

    exit_code = 1
