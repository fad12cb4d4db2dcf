"""Carry out a launch plan (zerokit.launch.plan): become the rank, run and supervise the local ranks, or
start the remote launch; each rank's line in the job's log, the stall watch around the local ranks, and the
job's restarts after a machine fault (`--max-restarts`: the one loop, zerokit.launch.restarts.loop, given the
strategies of one node, zerokit.launch.restarts.one_node, or of the head node, zerokit.launch.restarts.head_node)."""

from __future__ import annotations

import os
import socket
import sys
from collections.abc import Callable, Mapping
from dataclasses import replace
from pathlib import Path

from zerokit.launch.command import Command
from zerokit.launch.config import LaunchConfig
from zerokit.launch.job import Job
from zerokit.launch.plan import Plan
from zerokit.launch.rank.progress import TIMEOUT_VARIABLE
from zerokit.launch.restarts.head_node import NodeExits, Replan, Survivors
from zerokit.launch.restarts.loop import Attempt, Placement, Sight, restarting
from zerokit.launch.restarts.one_node import RankExits, SameHosts
from zerokit.launch.restarts.probe import probe_for
from zerokit.launch.watch.stall import StallWatch, exec_env, timeout_words


def rank_line(plan: Plan, command: Command, hostname: str, stall_timeout: float = 0.0) -> str:
    """One line per rank in the job's log: which rank runs where, how it meets the others, its stall timeout."""
    env = command.env
    return (
        f"launch: rank {env['RANK']} of {env['WORLD_SIZE']} on {hostname} (local rank {env['LOCAL_RANK']} of "
        f"{env['LOCAL_WORLD_SIZE']}, node {plan.node_rank} of {plan.nnodes}, {plan.environment}), main "
        f"{plan.main_address}:{plan.main_port}, interface {plan.ifname or 'default'}, {timeout_words(stall_timeout)}"
    )


def execute(
    plan: Plan,
    job: Job,
    config: LaunchConfig,
    replan: Replan,
    lost: Callable[[], Mapping[str, float]] | None = None,
) -> int:
    """Carry out a plan of job: become the rank (exec), run and supervise the local ranks (spawn), or run the remote
    launch; with `--max-restarts`, start it again after a machine fault.

    config's `stop_grace`: seconds between a stop signal passed on to the ranks and SIGKILL (watch/supervisor.py);
    `stall_timeout`: seconds without progress on any rank that end the job, 0 for never (zerokit.launch.watch.stall); in
    exec mode nothing supervises the rank, which watches itself (zerokit.launch.rank.progress); a stall's stacks go
    to the job's output folder, else launch's working folder. A head-node launch restarts on the hosts that answer,
    planned again by `replan`, its nodes counted lost by `lost` (heartbeats); the local ranks restart as they are
    (the plan has checked that they are the whole job)."""
    stall_timeout, folder = config.stall_timeout, Path(job.output_dir or os.getcwd())
    if plan.mode != "remote":
        hostname = socket.gethostname()
        for command in plan.commands:
            print(rank_line(plan, command, hostname, stall_timeout), file=sys.stderr, flush=True)
    if plan.mode == "exec":
        command = plan.commands[0]
        watch = exec_env(stall_timeout, folder, command.env["RANK"])
        env = {**os.environ, **command.env, TIMEOUT_VARIABLE: "0", **watch}
        os.execvpe(command.argv[0], list(command.argv), env)
    sight: Sight
    placement: Placement
    stall = StallWatch(stall_timeout, folder) if plan.mode == "spawn" and stall_timeout > 0 else None
    if plan.mode == "remote" and config.max_restarts:
        sight, placement = NodeExits(probe_for(config.launcher), lost), Survivors(config, replan, os.environ)
    else:
        sight, placement = RankExits(stall), SameHosts()
    commands = plan.commands
    if plan.mode == "spawn":  # the local ranks watched, or with their watch off whatever the environment says
        watched = stall.rank_env() if stall is not None else {TIMEOUT_VARIABLE: "0"}
        commands = tuple(replace(c, env={**c.env, **watched}) for c in commands)
    try:
        first = Attempt(commands, job, plan.hosts, plan.spares)
        return restarting(first, sight, placement, config.max_restarts, config.stop_grace)
    finally:
        if stall is not None:
            stall.close()
