"""The ranks' program: how a user's Python script runs as a rank, and whether the program can be started,
checked before any rank starts.

The exit codes are a shell's: 127 for a command not found, 126 for one that is not executable.
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
from collections.abc import Mapping, Sequence

from zerokit.foundations.errors import UserError
from zerokit.launch.command import Command
from zerokit.launch.job import HF_ACCUMULATION, HF_MICRO_BATCH, USER_SCRIPT, Job

# `launch -- python script.py`: the interpreters run as zerokit's own, through zerokit.launch.rank.user_script.
PYTHON_NAMES = ("python", "python3")
NOT_FOUND = 127
NOT_EXECUTABLE = 126


class CannotRun(UserError):
    """A program that cannot be started; the CLI exits with `exit_code` (127 or 126)."""

    def __init__(self, message: str, exit_code: int) -> None:
        super().__init__(message)
        self.exit_code = exit_code


def user_script_argv(words: Sequence[str], python: str) -> tuple[str, ...] | None:
    """`python script.py ARGS` or `script.py ARGS` as `PYTHON -m zerokit.launch.rank.user_script script.py ARGS`.

    PYTHON is the interpreter zerokit runs under (the image's, inside one); None for any other command.
    A script's process group comes up before the script runs, so that HF and DeepSpeed see every rank.
    """
    if words and words[0].endswith(".py"):
        return (python, "-m", USER_SCRIPT, *words)
    if len(words) > 1 and words[0] in (*PYTHON_NAMES, python) and words[1].endswith(".py"):
        return (python, "-m", USER_SCRIPT, *words[1:])
    return None


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


def check_batch_size(job: Job, world_size: int) -> None:
    """A script's `--deepspeed ds.json` whose fixed train_batch_size this job's ranks cannot make: refuse it
    here, before every rank fails in DeepSpeed's batch assertion. HF's flags and defaults (8 per device, 1
    accumulation step) give the rest, as HF hands them to DeepSpeed."""
    path = job.hf_deepspeed
    if not path or not path.endswith(".json"):
        return
    try:
        with open(path, encoding="utf-8") as file:
            config = json.load(file)
    except (OSError, ValueError):
        return  # the script reports it, as it would without launch
    total = config.get("train_batch_size") if isinstance(config, dict) else None
    try:
        micro = int(job.micro_batch or HF_MICRO_BATCH)
        steps = int(job.accumulation or HF_ACCUMULATION)
    except ValueError:
        return  # "auto" or a typo: HF fills or reports it
    if isinstance(total, int) and total != micro * steps * world_size:
        raise UserError(
            f"{path} fixes train_batch_size at {total}, but this job makes {micro} per rank x {steps} accumulation "
            f'step(s) x {world_size} rank(s) = {micro * steps * world_size}: set it to "auto", or start '
            f"{total // (micro * steps) if total % (micro * steps) == 0 else 'a matching number of'} ranks"
        )


def check_commands(commands: Sequence[Command], job: Job, environ: Mapping[str, str]) -> None:
    """check_program for each command, in the environment it will have; a user script's batch size, where a rank
    runs it (not behind the health check)."""
    for command in commands:
        check_program(command.argv[0], {**environ, **command.env}.get("PATH", os.defpath))
        if job.kind == "script" and command.argv == job.argv and "WORLD_SIZE" in command.env:
            check_batch_size(job, int(command.env["WORLD_SIZE"]))
