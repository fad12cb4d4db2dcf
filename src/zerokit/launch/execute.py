"""Carry out a launch plan (zerokit.launch.plan): become the rank, run and supervise the local ranks, or
start the remote launch; each rank's line in the job's log, and the stall watch around the local ranks."""

from __future__ import annotations

import os
import socket
import sys
from dataclasses import replace
from pathlib import Path

from zerokit.launch.command import Command
from zerokit.launch.plan import Plan
from zerokit.launch.rank.progress import TIMEOUT_VARIABLE
from zerokit.launch.stall import StallWatch, exec_env, timeout_words
from zerokit.launch.supervisor import execute_commands, output_dir


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


def execute(plan: Plan, stop_grace: float, stall_timeout: float = 0.0) -> int:
    """Carry out a plan: become the rank (exec), run and supervise the local ranks (spawn), or run the remote launch.

    `stop_grace`: seconds between a stop signal passed on to the ranks and SIGKILL (local.py). `stall_timeout`:
    seconds without progress on any rank that end the job, 0 for never (zerokit.launch.stall); in exec mode
    nothing supervises the rank, which watches itself (zerokit.launch.rank.progress)."""
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
        return execute_commands(commands, stop_grace)
    watch = StallWatch(stall_timeout, stall_report_folder(plan.commands[0]))
    try:
        commands = tuple(replace(c, env={**c.env, **watch.rank_env()}) for c in plan.commands)
        return execute_commands(commands, stop_grace, watch)
    finally:
        watch.close()


def off(commands: tuple[Command, ...]) -> tuple[Command, ...]:
    """The ranks with their watch off, whatever the environment says (--stall-timeout 0)."""
    return tuple(replace(c, env={**c.env, TIMEOUT_VARIABLE: "0"}) for c in commands)
