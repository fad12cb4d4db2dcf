"""Flux: tasks of `flux run`, with the variables flux-environment(7) lists for every task."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from tests.unit.cluster.plans import make_plan
from zerokit.cluster import FluxEnvironment, MpichEnvironment, detect_environment
from zerokit.cluster.flux import f58_decode
from zerokit.foundations.errors import UserError

from .observe import observed

SCRIPT = Path(__file__).resolve().parents[3] / "scripts/flux/train.sh"
# Stands in for flux-core's `flux` in the job script: the instance's id and hosts, and `flux run` echoed.
FLUX_STUB = """#!/bin/sh
case "$1" in
  getattr) echo "ƒ21" ;;
  hostlist) [ "$2" = --nth=0 ] && [ "$3" = instance ] && echo tioga12 ;;
  run) shift; echo "MASTER_ADDR=$MASTER_ADDR flux run $*" ;;
esac
"""

TASK = {  # task 5 of `flux run -N2 --tasks-per-node=4` inside `flux batch -N2`, job ƒ21 (58)
    "FLUX_JOB_ID": "ƒ21",
    "FLUX_JOB_SIZE": "8",
    "FLUX_JOB_NNODES": "2",
    "FLUX_TASK_RANK": "5",
    "FLUX_TASK_LOCAL_ID": "1",
    "FLUX_JOB_TMPDIR": "/tmp/flux-ƒ21",
    "FLUX_URI": "local:///tmp/flux-abc/local-1",
    "FLUX_KVS_NAMESPACE": "job-58",
    # the pmi shell plugin's
    "PMI_RANK": "5",
    "PMI_SIZE": "8",
    "PMI_FD": "12",
    "PMI_SPAWNED": "0",
    "FLUX_PMI_LIBRARY_PATH": "/usr/lib/flux/libpmi.so",
    "MASTER_ADDR": "tioga12",  # scripts/flux/train.sh: `flux hostlist --nth=0 instance`
}
# The batch script: Flux unsets FLUX_TASK_*, FLUX_JOB_* and PMI_* in an initial program; FLUX_URI stays.
BATCH_SCRIPT = {"FLUX_URI": "local:///tmp/flux-abc/local-0", "HOME": "/home/u"}


@pytest.mark.parametrize(
    ("environ", "expected"),
    [
        (TASK, (5, 1, 8, 4, 1, (), "tioga12", 20058)),
        ({**TASK, "FLUX_TASK_RANK": "0", "FLUX_TASK_LOCAL_ID": "0"}, (0, 0, 8, 4, 0, (), "tioga12", 20058)),
        (  # one node, ASCII job id, explicit port
            {**TASK, "FLUX_JOB_ID": "f2", "FLUX_JOB_NNODES": "1", "FLUX_JOB_SIZE": "2", "FLUX_TASK_RANK": "1",
             "MASTER_PORT": "4000"},
            (1, 1, 2, 2, 0, (), "tioga12", 4000),
        ),
    ],
)  # fmt: skip
def test_table(environ, expected):
    assert FluxEnvironment.detect(environ)
    assert observed(FluxEnvironment(environ)) == expected


def test_a_task_is_fluxs_not_mpichs_and_the_batch_script_is_no_rank():
    assert type(detect_environment(TASK)) is FluxEnvironment
    assert not MpichEnvironment.detect(TASK)
    assert detect_environment(BATCH_SCRIPT) is None


@pytest.mark.parametrize(
    ("job_id", "decimal"), [("ƒ2", "1"), ("ƒ21", "58"), ("f21", "58"), ("123456", "123456"), ("ƒ0O", "ƒ0O")]
)
def test_job_ids_are_decoded_from_f58(job_id, decimal):
    assert f58_decode(job_id) == decimal


@pytest.mark.parametrize(
    ("change", "field", "message"),
    [
        ({"FLUX_JOB_SIZE": "7"}, "local_world_size", "FLUX_JOB_SIZE=7 tasks on FLUX_JOB_NNODES=2 nodes"),
        ({"FLUX_TASK_RANK": "4", "FLUX_TASK_LOCAL_ID": "2"}, "node_rank", "keep Flux's default block task mapping"),
        ({"FLUX_JOB_NNODES": "0"}, "local_world_size", "FLUX_JOB_NNODES=0 must be at least 1"),
    ],
)
def test_what_flux_cannot_say_is_refused_with_the_fix(change, field, message):
    with pytest.raises(UserError, match=message):
        getattr(FluxEnvironment({**TASK, **change}), field)


def test_without_master_addr_the_fix_names_flux_hostlist():
    environ = {k: v for k, v in TASK.items() if k != "MASTER_ADDR"}
    with pytest.raises(UserError, match=r"flux hostlist --nth=0 instance"):
        _ = FluxEnvironment(environ).main_address


def test_plan_per_task():
    p = make_plan(["train", "--config", "zero3"], TASK)
    assert (p.mode, p.environment, p.nnodes, p.node_rank, p.world_size, p.main_address, p.main_port) == (
        "exec",
        "flux",
        2,
        1,
        8,
        "tioga12",
        20058,
    )
    (command,) = p.commands
    assert {k: command.env[k] for k in ("RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "GROUP_RANK")} == {
        "RANK": "5",
        "LOCAL_RANK": "1",
        "WORLD_SIZE": "8",
        "LOCAL_WORLD_SIZE": "4",
        "GROUP_RANK": "1",
    }


def test_plan_one_task_per_node_spawns_the_node_ranks():
    per_node = {**TASK, "FLUX_JOB_SIZE": "2", "FLUX_TASK_RANK": "1", "FLUX_TASK_LOCAL_ID": "0"}
    p = make_plan(["--nproc-per-node", "4", "train"], per_node)
    assert (p.mode, p.environment, p.nnodes, p.node_rank, p.world_size) == ("spawn", "flux", 2, 1, 8)
    assert [c.env["RANK"] for c in p.commands] == ["4", "5", "6", "7"]


def test_launcher_flux_requires_a_flux_task():
    assert make_plan(["--launcher", "flux", "train"], TASK).environment == "flux"


def test_the_job_script_starts_every_rank_with_flux_run_and_the_main_address(tmp_path):
    stub = tmp_path / "flux"
    stub.write_text(FLUX_STUB)
    stub.chmod(0o755)
    environ = {"PATH": f"{tmp_path}{os.pathsep}/usr/bin:/bin", "CONTAINER": "none", "HOME": str(tmp_path)}
    result = subprocess.run(["bash", str(SCRIPT)], env=environ, capture_output=True, text=True, check=True)
    assert result.stdout.split() == [
        "MASTER_ADDR=tioga12",
        *("flux", "run", "-N", "2", "--tasks-per-node=4", "--gpus-per-task=1"),
        *("launch", "--launcher", "flux", "train", "--config", "zero3", "--output-dir", "runs/zerokit-ƒ21"),
    ]
