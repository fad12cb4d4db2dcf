"""A rank in a container that lost its job: `apptainer exec --cleanenv` under srun or mpirun.

--cleanenv drops SLURM_*, OMPI_*, PMI_* ..., so every task would find no scheduler and train alone, on
the same output folder. Two signs, read from /proc (the container shares the host's PID namespace):
- the nearest ancestor past the runtime's own processes is a scheduler's task starter (`srun apptainer
  exec ...`: slurmstepd, then Apptainer's starter, then this rank). Its command name is readable by
  anyone; the job's variables are not there to read: srun sets them only on the task, which execs the
  runtime, and the runtime's starter keeps a few of its own.
- an ancestor's environment holds a job (a shell inside the job that ran the container), where readable.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Mapping
from pathlib import Path

from zerokit.cluster import detect_environment
from zerokit.image.runtimes import inside

PROC = Path("/proc")
MAX_ANCESTORS = 16
# Command names (/proc/PID/comm, 15 characters at most) of the processes that start a job's tasks.
TASK_STARTERS = {
    "slurmstepd": "Slurm",
    "orted": "Open MPI",
    "prted": "Open MPI",
    "mpirun": "Open MPI",
    "hydra_pmi_proxy": "MPICH",
    "sge_shepherd": "Grid Engine",
}
# The container runtimes' own processes between a task starter and the rank.
RUNTIME_PROCESSES = ("starter", "starter-suid", "apptainer", "singularity")
# export -p quotes the values (Slurm's SLURM_TASKS_PER_NODE=2(x2) breaks `env`'s lines in --env-file).
PASS_JOB_ENV = "--env-file <(export -p | grep -E ' (SLURM|OMPI|PMI|PMIX)_')"


def ancestors(proc: Path = PROC, pid: str = "self") -> Iterator[tuple[str, dict[str, str] | None]]:
    """(command name, environment or None where private) of this process's ancestors, nearest first."""
    for _ in range(MAX_ANCESTORS):
        try:
            status = (proc / pid / "status").read_text()
        except OSError:
            return
        pid = next((line.split()[1] for line in status.splitlines() if line.startswith("PPid:")), "0")
        if pid == "0":
            return
        try:
            comm = (proc / pid / "comm").read_text().strip()
        except OSError:
            return
        environ = None
        with contextlib.suppress(OSError):
            raw = (proc / pid / "environ").read_bytes()
            environ = dict(item.split("=", 1) for item in raw.decode(errors="replace").split("\0") if "=" in item)
        yield comm, environ


def hidden_job(environ: Mapping[str, str], proc: Path = PROC) -> tuple[str, str] | None:
    """(what happened, the fix) when a container hid the job's variables from this rank; None otherwise.

    `launch` and `train` refuse to start with f"{what}: {fix}"; doctor shows it as a failed check.
    """
    container = inside(environ)
    if container is None or detect_environment(environ) is not None:
        return None
    runtime, _ = container
    started_by, nearest = None, True
    for comm, ancestor in ancestors(proc):
        job = detect_environment(ancestor) if ancestor else None
        if job is not None:
            started_by = job.title
            break
        if comm in RUNTIME_PROCESSES:
            continue
        if nearest and comm in TASK_STARTERS:
            started_by = TASK_STARTERS[comm]
            break
        nearest = False
    if started_by is None:
        return None
    what = (
        f"this is a rank that {started_by} started, but {runtime.name} hid its variables (--cleanenv or "
        "--containall), so each rank would train alone"
    )
    fix = f'srun (or mpirun) bash -c "{runtime.name} exec --cleanenv {PASS_JOB_ENV} IMAGE ..."'
    return what, f"drop --cleanenv/--containall, or pass them to each task: {fix}"
