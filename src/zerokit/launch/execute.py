"""Carry out a launch plan (zerokit.launch.plan): become the rank, run and supervise the local ranks, or
start the remote launch; each rank's line in the job's log, the stall watch around the local ranks, and their
restarts after a machine fault (`--max-restarts`, zerokit.launch.restart)."""

from __future__ import annotations

import os
import socket
import sys
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

from zerokit.foundations import restart_log
from zerokit.foundations.errors import UserError
from zerokit.foundations.flags import flag_value
from zerokit.image.provenance import now
from zerokit.launch.command import Command
from zerokit.launch.plan import Plan
from zerokit.launch.rank.progress import TIMEOUT_VARIABLE
from zerokit.launch.restart import log_path, restart_argv
from zerokit.launch.stall import StallWatch, exec_env, timeout_words
from zerokit.launch.supervisor import (
    Fault,
    has_final_model,
    output_dir,
    outputs_state,
    queued_signals,
    say,
    supervise,
)
from zerokit.outputs.checkpoints import resolve_resume


def rank_line(plan: Plan, command: Command, hostname: str, stall_timeout: float = 0.0) -> str:
    """One line per rank in the job's log: which rank runs where, how it meets the others, its stall timeout."""
    env = command.env
    return (
        f"launch: rank {env['RANK']} of {env['WORLD_SIZE']} on {hostname} (local rank {env['LOCAL_RANK']} of "
        f"{env['LOCAL_WORLD_SIZE']}, node {plan.node_rank} of {plan.nnodes}, {plan.environment}), main "
        f"{plan.main_address}:{plan.main_port}, interface {plan.ifname or 'default'}, {timeout_words(stall_timeout)}"
    )


def stall_report_folder(command: Command) -> Path:
    """Where a stall's stacks go: the command's output folder, else launch's working folder (zerokit.launch.stall)."""
    return Path(output_dir(command.argv) or os.getcwd())


def execute(plan: Plan, stop_grace: float, stall_timeout: float = 0.0, max_restarts: int = 0) -> int:
    """Carry out a plan: become the rank (exec), run and supervise the local ranks (spawn), or run the remote launch.

    `stop_grace`: seconds between a stop signal passed on to the ranks and SIGKILL (local.py). `stall_timeout`:
    seconds without progress on any rank that end the job, 0 for never (zerokit.launch.stall); in exec mode
    nothing supervises the rank, which watches itself (zerokit.launch.rank.progress). `max_restarts`: how often
    the local ranks start again after a machine fault (the plan has checked that they are the whole job)."""
    if plan.mode != "remote":
        hostname = socket.gethostname()
        for command in plan.commands:
            print(rank_line(plan, command, hostname, stall_timeout), file=sys.stderr, flush=True)
    if plan.mode == "exec":
        command = plan.commands[0]
        watch = exec_env(stall_timeout, stall_report_folder(command), command.env["RANK"])
        env = {**os.environ, **command.env, TIMEOUT_VARIABLE: "0", **watch}
        os.execvpe(command.argv[0], list(command.argv), env)
    if plan.mode == "remote" or stall_timeout <= 0:
        commands = plan.commands if plan.mode == "remote" else off(plan.commands)
        return restarting(commands, stop_grace, None, max_restarts)
    watch = StallWatch(stall_timeout, stall_report_folder(plan.commands[0]))
    try:
        commands = tuple(replace(c, env={**c.env, **watch.rank_env()}) for c in plan.commands)
        return restarting(commands, stop_grace, watch, max_restarts)
    finally:
        watch.close()


def restarting(commands: Sequence[Command], stop_grace: float, stall: StallWatch | None, max_restarts: int) -> int:
    """Run the commands under a Supervisor; after a machine fault, while restarts remain, again from the run's
    last whole checkpoint (zerokit.launch.restart), each fault logged (restart_log) and said in one line."""
    argv = commands[0].argv
    log = log_path(output_dir(argv), Path.cwd())
    events: list[dict] = []
    restart = 0
    with queued_signals() as received:
        while True:
            restart += 1
            code, supervisor = supervise(commands, stop_grace, stall, received)
            fault = supervisor.fault()
            if fault is None or max_restarts == 0 or has_final_model(argv):
                return code
            commands = tuple(
                replace(c, argv=restart_argv(c.argv), env={**c.env, restart_log.VARIABLE: str(log)}) for c in commands
            )
            again = restart <= max_restarts
            resumes = resume_point(commands[0].argv) if again else None
            events.append(fault_event(fault, restart if again else None, max_restarts, resumes))
            kept = write_log(log, events)
            if not again:
                say(
                    f"{fault.who} failed again ({fault.cause}); restarts exhausted ({max_restarts} of "
                    f"{max_restarts}): {outputs_state(argv)}; {kept}"
                )
                return code
            start = f"from {resumes}" if resumes else "as given"
            say(f"{fault.who} {fault.cause}: a machine fault; restart {restart} of {max_restarts}, {start}; {kept}")
            if stall is not None:
                stall.reset()


def resume_point(argv: Sequence[str]) -> str | None:
    """The checkpoint a restarted train resumes from (`--resume auto`: the newest whole one; or as given); None
    for a command that is not train's, or when there is none (train then starts from step 0)."""
    value, folder = flag_value(argv, "--resume"), output_dir(argv)
    if value != "auto" or folder is None:
        return value
    try:
        found = resolve_resume("auto", Path(folder))
    except UserError:  # every checkpoint damaged: train says so itself
        return None
    return str(found) if found else None


def fault_event(fault: Fault, restart: int | None, max_restarts: int, resumes: str | None) -> dict:
    """One fault in the log: when, where, what, and the restart it led to (None: restarts exhausted)."""
    return {
        "at": now(),
        "node": socket.gethostname(),
        "rank": fault.rank,
        "cause": fault.cause,
        "exit": fault.code,
        "restart": restart,
        "max_restarts": max_restarts,
        "resumes_from": resumes,
    }


def write_log(path: Path, events: list[dict]) -> str:
    """Write the log; how the line names it (a log that cannot be written is said, and the job goes on)."""
    try:
        restart_log.write_events(path, events)
    except OSError as err:
        return f"faults not logged to {path} ({err.strerror})"
    return f"faults logged in {path}"


def off(commands: tuple[Command, ...]) -> tuple[Command, ...]:
    """The ranks with their watch off, whatever the environment says (--stall-timeout 0)."""
    return tuple(replace(c, env={**c.env, TIMEOUT_VARIABLE: "0"}) for c in commands)
