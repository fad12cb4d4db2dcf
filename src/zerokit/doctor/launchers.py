"""Launchers: the scheduler or MPI environment this runs in, and the tools starting ranks across nodes needs.

On one node `launch` starts the ranks itself and needs none of them. Across nodes: srun inside a Slurm
job, mpirun (or mpiexec) inside a PBS, SGE or LSF job or an MPI launch, and pdsh with ssh otherwise.
"""

from __future__ import annotations

import os
import shutil

from zerokit.doctor.context import Context
from zerokit.doctor.result import CheckResult, fail, ok, skip
from zerokit.errors import UserError

# A batch job's own variables: set in the job script too, before any rank is started.
JOB_VARIABLES: dict[str, str] = {"SLURM_JOB_ID": "slurm", "PBS_JOBID": "pbs", "LSB_JOBID": "lsf", "PE_HOSTFILE": "sge"}

TOOL_FIXES: dict[str, str] = {
    "pdsh": "install pdsh (`apt-get install pdsh`; the zerokit images have it), or start under a scheduler "
    "(srun, mpirun)",
    "ssh": "install openssh-client and set up keys between the nodes, or start under a scheduler (srun, mpirun)",
    "mpirun": "load the site's MPI (`module load openmpi`) or install openmpi-bin (the zerokit images have it)",
    "srun": "run on a node with Slurm's client tools; with a container, call srun on the host: "
    "`srun apptainer exec ... launch ...`",
}


def environment_name(ctx: Context) -> tuple[str | None, str]:
    """(scheduler or launcher id, description): a process started by one, else the batch job it runs in."""
    try:
        from zerokit.cluster import detect_environment

        found = detect_environment(ctx.environ)
    except (ImportError, UserError) as error:
        return None, f"could not read the cluster environment: {error}"
    if found is not None:
        try:
            where = f"rank {found.rank} of {found.world_size}"
        except UserError as error:
            where = str(error)
        return found.name, f"{found.title}: {where}"
    job = next((kind for variable, kind in JOB_VARIABLES.items() if ctx.environ.get(variable)), None)
    if job:
        return job, f"inside a {job} job, no ranks started yet"
    return None, "no scheduler or MPI launcher: `launch` starts the ranks (over pdsh and ssh across nodes)"


def needed_tools(kind: str | None, multi_node: bool) -> tuple[str, ...]:
    if not multi_node:
        return ()
    if kind == "slurm":
        return ("srun",)
    if kind is None or kind == "torchrun":
        return ("pdsh", "ssh")
    return ("mpirun",)  # PBS, SGE, LSF and the MPI launchers


def find_tool(tool: str, path: str | None) -> str | None:
    if tool == "mpirun":
        return shutil.which("mpirun", path=path) or shutil.which("mpiexec", path=path)
    return shutil.which(tool, path=path)


def check_launchers(ctx: Context) -> list[CheckResult]:
    kind, description = environment_name(ctx)
    results = [ok("launcher: environment", description)]
    needed = needed_tools(kind, ctx.multi_node)
    shown = ("pdsh", "ssh", "mpirun", *(("srun",) if kind == "slurm" else ()))
    for tool in shown:
        name = f"launcher: {tool}"
        found = find_tool(tool, ctx.environ.get("PATH", os.defpath))
        if found:
            results.append(ok(name, found))
        elif tool in needed:
            results.append(
                fail(name, f"{tool} not on PATH, and starting ranks across nodes here needs it", TOOL_FIXES[tool])
            )
        else:
            results.append(skip(name, "not on PATH; not needed " + ("here" if ctx.multi_node else "on one node")))
    return results
