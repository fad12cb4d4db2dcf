"""Whether the ranks' program can be started, checked before any rank starts.

The exit codes are a shell's: 127 for a command not found, 126 for one that is not executable.
"""

from __future__ import annotations

import os
import shlex
import shutil
from collections.abc import Mapping, Sequence

from zerokit.errors import UserError
from zerokit.launch.local import Command

NOT_FOUND = 127
NOT_EXECUTABLE = 126


class CannotRun(UserError):
    """A program that cannot be started; the CLI exits with `exit_code` (127 or 126)."""

    def __init__(self, message: str, exit_code: int) -> None:
        super().__init__(message)
        self.exit_code = exit_code


def check_program(program: str, search_path: str) -> None:
    """Raise CannotRun, naming the fix, when `program` cannot be run.

    A name without a slash is looked up in `search_path`, as exec does (and subprocess, given the
    rank's environment); a path is taken as it is.
    """
    if os.sep not in program:
        if shutil.which(program, path=search_path) is None:
            raise CannotRun(
                f"command not found: {program} (searched PATH={search_path}): "
                "check the spelling, install it, or give its full path",
                NOT_FOUND,
            )
    elif not os.path.exists(program):
        raise CannotRun(f"no such file: {program}: check the path", NOT_FOUND)
    elif os.path.isdir(program) or not os.access(program, os.X_OK):
        raise CannotRun(
            f"{program} is not an executable file: `chmod +x {shlex.quote(program)}`, or run it with its interpreter",
            NOT_EXECUTABLE,
        )


def check_commands(commands: Sequence[Command], environ: Mapping[str, str]) -> None:
    """check_program for each command, in the environment it will have."""
    for command in commands:
        check_program(command.argv[0], {**environ, **command.env}.get("PATH", os.defpath))
