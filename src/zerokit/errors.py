"""The one exception type for bad user input: the CLI prints it as one line and exits 2."""


class UserError(Exception):
    """Bad input from the user. The message says what is wrong and how to fix it."""
