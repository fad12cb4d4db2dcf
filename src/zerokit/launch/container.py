"""A rank in a container that lost its job: `apptainer exec --cleanenv` under srun or mpirun.

--cleanenv drops SLURM_*, OMPI_*, PMI_* ..., so every task would find no scheduler and train alone, on
the same output folder. The job's variables are still in the environment of Apptainer's runtime parent
(an ancestor process): finding a scheduler there, and none here, is the sign.
"""

from __future__ import annotations

import contextlib
from collections.abc import Mapping
from pathlib import Path

from zerokit.cluster import detect_environment
from zerokit.runtimes import inside

PROC = Path("/proc")
MAX_ANCESTORS = 16
PASS_JOB_ENV = "--env-file <(env | grep -E '^(SLURM|OMPI|PMI|PMIX|PBS|SGE|LSB)_')"


def ancestors_environ(proc: Path = PROC, pid: str = "self") -> list[dict[str, str]]:
    """The environments of this process's ancestors that can be read (others' are private), nearest first."""
    found = []
    for _ in range(MAX_ANCESTORS):
        try:
            status = (proc / pid / "status").read_text()
        except OSError:
            break
        pid = next((line.split()[1] for line in status.splitlines() if line.startswith("PPid:")), "0")
        if pid in ("0", "1"):
            break
        with contextlib.suppress(OSError):
            raw = (proc / pid / "environ").read_bytes()
            found.append(dict(item.split("=", 1) for item in raw.decode(errors="replace").split("\0") if "=" in item))
    return found


def hidden_job(environ: Mapping[str, str], proc: Path = PROC) -> tuple[str, str] | None:
    """(what happened, the fix) when a container hid the job's variables from this rank; None otherwise.

    `launch` and `train` refuse to start with f"{what}: {fix}"; doctor shows it as a failed check.
    """
    container = inside(environ)
    if container is None or detect_environment(environ) is not None:
        return None
    runtime, _ = container
    for ancestor in ancestors_environ(proc):
        job = detect_environment(ancestor)
        if job is not None:
            what = (
                f"this is a rank that {job.title} started, but {runtime.name} hid its variables (--cleanenv or "
                "--containall), so each rank would train alone"
            )
            fix = f"drop --cleanenv, or pass them: `{runtime.name} exec --cleanenv {PASS_JOB_ENV} IMAGE ...`"
            return what, fix
    return None
