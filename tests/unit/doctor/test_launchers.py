"""Launcher tools: required only across nodes, and which depends on the scheduler found."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.unit.doctor.conftest import context, failures, only, run_main
from zerokit.doctor.launchers import check_launchers


def tools_dir(tmp_path: Path, *names: str) -> str:
    """A PATH of executable stand-ins for the named tools (and nothing else)."""
    folder = tmp_path / "bin"
    folder.mkdir(exist_ok=True)
    for name in names:
        tool = folder / name
        tool.write_text("#!/bin/sh\nexit 0\n")
        tool.chmod(0o755)
    return str(folder)


def test_on_one_node_no_tool_is_needed(tmp_path: Path):
    results = check_launchers(context({"PATH": tools_dir(tmp_path)}))
    assert [(r.name, r.status) for r in results] == [
        ("launcher: environment", "ok"),
        ("launcher: pdsh", "skip"),
        ("launcher: ssh", "skip"),
        ("launcher: mpirun", "skip"),
    ]


def test_across_nodes_without_a_scheduler_pdsh_and_ssh_are_needed(tmp_path: Path, environ, capsys):
    environ["PATH"] = tools_dir(tmp_path)
    code, rows = run_main(["--multi-node", "--strict", "--skip", "interface", "--skip", "hostname"], environ, capsys)
    assert code == 1
    assert failures(rows) == ["launcher: pdsh", "launcher: ssh"]
    (pdsh,) = [r for r in rows if r["name"] == "launcher: pdsh"]
    assert "install pdsh" in pdsh["fix"]
    environ["PATH"] = tools_dir(tmp_path, "pdsh", "ssh")
    results = check_launchers(context(environ, multi_node=True))
    assert only(results, "launcher: pdsh").detail == f"{environ['PATH']}/pdsh"
    assert only(results, "launcher: mpirun").status == "skip"


def test_inside_a_slurm_job_srun_is_needed(tmp_path: Path):
    environ = {"PATH": tools_dir(tmp_path), "SLURM_JOB_ID": "4242"}
    results = check_launchers(context(environ, multi_node=True))
    assert only(results, "launcher: environment").detail == "inside a slurm job, no ranks started yet"
    srun = only(results, "launcher: srun")
    assert srun.status == "fail" and "srun apptainer exec" in srun.fix
    assert only(results, "launcher: pdsh").status == "skip"


@pytest.mark.parametrize("job", [{"PBS_JOBID": "7.pbs"}, {"LSB_JOBID": "9"}])
def test_inside_other_batch_jobs_mpirun_is_needed_and_mpiexec_will_do(tmp_path: Path, job: dict[str, str]):
    environ = {"PATH": tools_dir(tmp_path), **job}
    assert only(check_launchers(context(environ, multi_node=True)), "launcher: mpirun").status == "fail"
    environ["PATH"] = tools_dir(tmp_path, "mpiexec")
    assert only(check_launchers(context(environ, multi_node=True)), "launcher: mpirun").status == "ok"


def test_a_started_rank_names_its_launcher(tmp_path: Path):
    environ = {"PATH": tools_dir(tmp_path), "RANK": "1", "WORLD_SIZE": "4", "LOCAL_RANK": "1", "LOCAL_WORLD_SIZE": "2"}
    described = only(check_launchers(context(environ)), "launcher: environment").detail
    assert described == "torchrun: rank 1 of 4"


def test_the_path_comes_from_the_context_not_the_process(tmp_path: Path):
    assert os.environ.get("PATH")
    results = check_launchers(context({"PATH": tools_dir(tmp_path)}))
    assert only(results, "launcher: ssh").status == "skip"  # /usr/bin/ssh may exist, but not on this PATH


def test_inside_a_flux_job_flux_is_needed(tmp_path: Path):
    environ = {"PATH": tools_dir(tmp_path), "FLUX_URI": "local:///tmp/flux-abc/local-0"}
    results = check_launchers(context(environ, multi_node=True))
    assert only(results, "launcher: environment").detail == "inside a flux job, no ranks started yet"
    flux = only(results, "launcher: flux")
    assert flux.status == "fail" and "flux run apptainer exec" in flux.fix
    assert [r.status for r in results if r.name in ("launcher: pdsh", "launcher: mpirun")] == ["skip", "skip"]


def test_a_pytorchjob_pod_needs_no_tool_across_nodes(tmp_path: Path):
    environ = {
        "PATH": tools_dir(tmp_path),
        "KUBERNETES_SERVICE_HOST": "10.96.0.1",
        "MASTER_ADDR": "pt-master-0",
        "RANK": "1",
        "WORLD_SIZE": "2",
        "PET_NODE_RANK": "1",
        "PET_NNODES": "2",
    }
    results = check_launchers(context(environ, multi_node=True))
    assert only(results, "launcher: environment").detail == "Kubeflow PyTorchJob: rank 1 of 2"
    assert failures([{"name": r.name, "status": r.status} for r in results]) == []
