"""`launch`: arguments -> config -> job (the program, read once) -> plan -> execution, with restarts (or, with
--dry-run, the plan printed).

Per rank under srun / mpirun / PBS / SGE / LSF (`srun ... launch train`), per node with
`--nproc-per-node K`, or from a head node over pdsh or mpirun (`--launcher pdsh --hostfile H`), or srun from a
Slurm job's batch script (`--launcher srun`).
"""

from __future__ import annotations

import json
import os
import shlex
import sys
from collections.abc import Callable
from pathlib import Path

from zerokit.cluster.base import ClusterEnvironment
from zerokit.cluster.nic import interface_to
from zerokit.foundations import startup_marks
from zerokit.image.ds_install import read_prebuilt
from zerokit.image.provenance import redacted_argv
from zerokit.launch.config import LaunchConfig, parse
from zerokit.launch.execute import execute
from zerokit.launch.job import read_job
from zerokit.launch.job_ops import check_job_ops, ops_loaded
from zerokit.launch.nccl_plugin import check_nccl_plugin
from zerokit.launch.plan import Plan, plan
from zerokit.launch.preflight import preflight_failures, report, runs_preflight
from zerokit.launch.program import check_commands
from zerokit.launch.rank.environment import check_port_free, free_port, launch_environment, refuse_hidden_job
from zerokit.launch.restarts.head_node import Replan
from zerokit.launch.watch import heartbeat
from zerokit.launch.watch.supervisor import stop_when_stdin_closes

PORT_FIX = "pass a free one with --master-port PORT (or MASTER_PORT), or set neither and launch picks one"


def describe(p: Plan) -> str:
    lines = [
        f"launch: {p.mode} under {p.environment}: node {p.node_rank} of {p.nnodes}, {p.nproc_per_node} rank(s) "
        f"per node, world size {p.world_size}, main {p.main_address}:{p.main_port}, interface {p.ifname or '-'}"
    ]
    if p.spares:
        lines.append(f"  spare node(s), for restarts: {','.join(p.spares)}")
    lines += [
        f"  {' '.join(f'{k}={v}' for k, v in sorted(c.env.items()))} {' '.join(redacted_argv(list(c.argv)))}"
        for c in p.commands
    ]
    return "\n".join(lines)


def write_deepspeed_env(p: Plan, folder: Path) -> None:
    """Leave the variables in .deepspeed_env, which DeepSpeed's own launcher exports on every node.

    An existing file with other content is kept (a user's), with a note on stderr.
    """
    path = folder / ".deepspeed_env"
    text = "".join(f"{k}={v}\n" for k, v in sorted(p.env.items()) if k.startswith(("NCCL_", "GLOO_", "OMP_")))
    if path.exists() and path.read_text() != text:
        print(f"launch: kept the existing {path} (it differs from what launch would write)", file=sys.stderr)
        return
    path.write_text(text)


def main(argv: list[str]) -> int:
    return run(parse(argv, os.environ, sys.executable))


def run(config: LaunchConfig) -> int:
    """Plan the ranks of config here and run them (or print the plan, or the command)."""
    cluster = launch_environment(os.environ, config.scheduler)
    if cluster is None:
        refuse_hidden_job(os.environ)
    job = read_job(config.target, os.environ)  # what launch knows of the program, read once
    # The head's watch of its nodes' heartbeats, for a launch that restarts them: opened when the plan names the
    # hosts (a head-node plan with a command per host), never for a plan only printed.
    beats = config.max_restarts and config.node_timeout and not (config.dry_run or config.print_command)
    watch = heartbeat.HeadHeartbeats(config.node_timeout) if beats else None
    beat = watch.address if watch is not None else None
    the_plan = plan(config, cluster, os.environ, os.cpu_count() or 1, interface_to, free_port, beat)
    for note in the_plan.notes:
        print(f"launch: {note}", file=sys.stderr)
    if config.print_command:
        print(shlex.join(the_plan.commands[0].argv))
        return 0
    if config.dry_run:
        print(json.dumps(the_plan.to_json(), indent=2) if config.as_json else describe(the_plan))
        return 0
    check_commands(the_plan.commands, job, os.environ)
    if the_plan.environment == "local":  # rank 0's rendezvous store listens here
        check_port_free(the_plan.main_port, PORT_FIX)
    if config.preflight and runs_preflight(the_plan):
        prebuilt = read_prebuilt()
        loaded = ops_loaded(job, os.environ, prebuilt)
        check_job_ops(loaded, prebuilt, config.strict_ops)
        check_nccl_plugin(config.nccl_plugin, {**os.environ, **the_plan.env})
        failures = preflight_failures(the_plan, os.environ, loaded)
        if failures:
            report(failures)
            return 1
        startup_marks.mark("preflight")
    if the_plan.mode == "remote" and config.launcher == "pdsh":
        write_deepspeed_env(the_plan, Path(config.workdir))
    startup_marks.pass_on(os.environ, "launch ")  # for bench's start-up breakdown (StepClock)
    if config.stop_when_stdin_closes:
        stop_when_stdin_closes()
    if config.node_host and heartbeat.VARIABLE in os.environ:  # a node of a head-node launch that watches
        heartbeat.send_heartbeats(os.environ[heartbeat.VARIABLE], config.node_host)
    return execute(the_plan, job, config, replanner(cluster, beat), watch.lost if watch is not None else None)


def replanner(cluster: ClusterEnvironment | None, beat: Callable[[tuple[str, ...]], str] | None) -> Replan:
    """How a head-node restart plans the job again (on other hosts): as the first plan was made, with the same
    heartbeat watch."""
    return lambda config, environ: plan(config, cluster, environ, os.cpu_count() or 1, interface_to, free_port, beat)
