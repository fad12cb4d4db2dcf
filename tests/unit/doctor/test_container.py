"""Inside a container: the host's variables leaking in, packages under $HOME, $HOME missing, a hidden job."""

from __future__ import annotations

from pathlib import Path

from tests.unit.doctor.conftest import context, healthy_environ
from zerokit.doctor.container import check_container
from zerokit.image.container import hidden_job

SIF = {"APPTAINER_CONTAINER": "/shared/train.sif"}
IMAGE_PATH = ["/opt/venv/lib/python3.11/site-packages"]


def rows(environ, sys_path=IMAGE_PATH) -> dict:
    return {r.name: r for r in check_container(context(environ), sys_path=sys_path, user_site="/nowhere")}


def test_outside_a_container_there_is_nothing_to_check(tmp_path: Path):
    (row,) = check_container(context(healthy_environ(tmp_path)))
    assert row.status == "skip"


def test_a_clean_container_passes(tmp_path: Path):
    found = rows({**healthy_environ(tmp_path), **SIF, "LD_LIBRARY_PATH": "/.singularity.d/libs"})
    assert {r.status for r in found.values()} == {"ok"}
    assert found["container"].detail == "apptainer, image /shared/train.sif"


def test_module_variables_from_the_host_fail_with_cleanenv_as_the_fix(tmp_path: Path):
    environ = {
        **healthy_environ(tmp_path),
        **SIF,
        "PYTHONPATH": "/opt/m/py",
        "CUDA_HOME": "/opt/cuda",
        "LD_LIBRARY_PATH": "/opt/cuda/lib64:/.singularity.d/libs",
        "ZEROKIT_HOST_PYTHONHOME": "/opt/m",
    }
    row = rows(environ)["container: host environment"]
    assert row.status == "fail"
    assert row.detail.startswith(
        "PYTHONPATH=/opt/m/py, CUDA_HOME=/opt/cuda, LD_LIBRARY_PATH=/opt/cuda/lib64, PYTHONHOME=/opt/m came in"
    )
    assert row.fix.startswith("`apptainer exec --cleanenv ...`")


def test_packages_under_home_on_sys_path_fail(tmp_path: Path):
    environ = {**healthy_environ(tmp_path), **SIF}
    local = f"{environ['HOME']}/.local/lib/python3.11/site-packages"
    row = rows(environ, sys_path=[local, *IMAGE_PATH])["container: user site-packages"]
    assert row.status == "fail" and local in row.detail and row.fix.startswith("unset PYTHONPATH")


def test_a_home_that_is_not_there_fails(tmp_path: Path):
    environ = {**healthy_environ(tmp_path), **SIF, "HOME": str(tmp_path / "not-mounted")}
    row = rows(environ)["container: $HOME"]
    assert row.status == "warn" and "--no-home" in row.fix


def write_process(proc: Path, pid: str, ppid: str, environ: dict[str, str] | None, comm: str = "x") -> None:
    """A fake /proc/PID; environ None: private, as another user's or a non-dumpable process's is."""
    (proc / pid).mkdir(parents=True)
    (proc / pid / "status").write_text(f"Name:\t{comm}\nPPid:\t{ppid}\n")
    (proc / pid / "comm").write_text(comm + "\n")
    if environ is not None:
        (proc / pid / "environ").write_bytes(b"\0".join(f"{k}={v}".encode() for k, v in environ.items()) + b"\0")


def test_a_job_hidden_by_cleanenv_is_found_in_the_runtime_parent(tmp_path: Path):
    """This process (self) has only Apptainer's variables; its parent, Apptainer's runtime, has srun's."""
    proc = tmp_path / "proc"
    srun = {
        "SLURM_JOB_ID": "7",
        "SLURM_PROCID": "1",
        "SLURM_NTASKS": "2",
        "SLURM_LOCALID": "1",
        "SLURM_NODEID": "0",
        "SLURM_JOB_NODELIST": "node1",
        "SLURM_TASKS_PER_NODE": "2",
        "SLURM_STEP_ID": "0",
    }
    write_process(proc, "self", "40", SIF)
    write_process(proc, "40", "30", srun)
    write_process(proc, "30", "1", {})
    what, fix = hidden_job(SIF, proc)
    assert "Slurm started" in what and "each rank would train alone" in what
    assert fix == (
        'drop --cleanenv/--containall, or pass them to each task: srun (or mpirun) bash -c "apptainer exec --cleanenv '
        "--env-file <(export -p | grep -E ' (SLURM|OMPI|PMI|PMIX)_') IMAGE ...\""
    )
    assert hidden_job({**SIF, **srun}, proc) is None  # not hidden: the rank sees them
    assert hidden_job({}, proc) is None  # not in a container


def test_a_rank_that_slurmstepd_started_through_the_runtime_is_a_hidden_job(tmp_path: Path):
    """`srun apptainer exec --cleanenv`, as /proc shows it inside the SIF: the rank, Apptainer's starter (a few
    variables of its own), slurmstepd (no job variables: srun sets them only on the task)."""
    proc = tmp_path / "proc"
    write_process(proc, "self", "1603", SIF, "python")
    write_process(proc, "1603", "1598", {"APPTAINER_X": "1"}, "starter")
    write_process(proc, "1598", "1", None, "slurmstepd")
    write_process(proc, "1", "0", None, "init")
    what, _ = hidden_job(SIF, proc)
    assert what.startswith("this is a rank that Slurm started, but apptainer hid its variables")


def test_a_shell_between_the_task_and_the_container_is_not_a_job_rank(tmp_path: Path):
    """`srun --pty bash`, then `apptainer exec --cleanenv ... train` by hand: one rank, on purpose."""
    proc = tmp_path / "proc"
    write_process(proc, "self", "50", SIF, "python")
    write_process(proc, "50", "40", None, "starter")
    write_process(proc, "40", "30", None, "bash")
    write_process(proc, "30", "1", None, "slurmstepd")
    assert hidden_job(SIF, proc) is None
