"""Launchers: the scheduler or MPI environment this runs in, and the tools starting ranks across nodes needs.

On one node `launch` starts the ranks itself and needs none of them. Across nodes each environment
names its tools (`multi_node_tools`, zerokit.cluster), and outside any, `launch` needs pdsh and ssh.
"""

from __future__ import annotations

import os

from zerokit.cluster import ENVIRONMENTS, ClusterEnvironment, detect_environment
from zerokit.cluster.tools import HEAD_NODE_TOOLS, MPIRUN, PDSH, SSH, Tool
from zerokit.doctor.context import Context
from zerokit.doctor.result import CheckResult, fail, ok, skip
from zerokit.foundations.errors import UserError

# Shown whether needed or not: what a user may start ranks with anywhere.
ALWAYS_SHOWN: tuple[Tool, ...] = (PDSH, SSH, MPIRUN)


def find_environment(ctx: Context) -> tuple[type[ClusterEnvironment] | None, str]:
    """(environment class, description): the one that started this process, else the batch job it runs in."""
    try:
        found = detect_environment(ctx.environ)
    except UserError as error:
        return None, f"could not read the cluster environment: {error}"
    if found is not None:
        try:
            where = f"rank {found.rank} of {found.world_size}"
        except UserError as error:
            where = str(error)
        return type(found), f"{found.title}: {where}"
    job = next((env for env in ENVIRONMENTS if any(ctx.environ.get(v) for v in env.job_variables)), None)
    if job is not None:
        return job, f"inside a {job.name} job, no ranks started yet"
    return None, "no scheduler or MPI launcher: `launch` starts the ranks (over pdsh and ssh across nodes)"


def needed_tools(environment: type[ClusterEnvironment] | None, multi_node: bool) -> tuple[Tool, ...]:
    if not multi_node:
        return ()
    return HEAD_NODE_TOOLS if environment is None else environment.multi_node_tools


def check_launchers(ctx: Context) -> list[CheckResult]:
    environment, description = find_environment(ctx)
    results = [ok("launcher: environment", description)]
    needed = needed_tools(environment, ctx.multi_node)
    own = environment.multi_node_tools if environment is not None else ()
    shown = (*ALWAYS_SHOWN, *(tool for tool in own if tool not in ALWAYS_SHOWN))
    path = ctx.environ.get("PATH", os.defpath)
    for tool in shown:
        name = f"launcher: {tool.name}"
        found = tool.find(path)
        if found:
            results.append(ok(name, found))
        elif tool in needed:
            results.append(
                fail(name, f"{tool.name} not on PATH, and starting ranks across nodes here needs it", tool.fix)
            )
        else:
            results.append(skip(name, "not on PATH; not needed " + ("here" if ctx.multi_node else "on one node")))
    return results
