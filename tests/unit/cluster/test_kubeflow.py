"""Kubeflow PyTorchJob: a pod per node, with the variables training-operator v1.9 sets in each."""

from __future__ import annotations

import re

import pytest

from tests.unit.cluster.plans import make_plan
from zerokit.cluster import KubeflowEnvironment, OpenMpiEnvironment, TorchrunEnvironment, detect_environment
from zerokit.foundations.errors import UserError

from .observe import observed

KUBELET = {"KUBERNETES_SERVICE_HOST": "10.96.0.1", "KUBERNETES_SERVICE_PORT": "443", "HOSTNAME": "pt-worker-1"}
# Pod pt-worker-1 of PyTorchJob "pt" (Master: 1 replica, Worker: 2), nprocPerNode left to its default "auto":
# pkg/controller.v1/pytorch/envvar.go and master.go, release-1.9.
WORKER_1 = {
    **KUBELET,
    "PYTHONUNBUFFERED": "1",
    "MASTER_PORT": "23456",
    "PET_MASTER_PORT": "23456",
    "MASTER_ADDR": "pt-master-0",
    "PET_MASTER_ADDR": "pt-master-0",
    "WORLD_SIZE": "3",
    "RANK": "2",
    "PET_NODE_RANK": "2",
    "PET_NPROC_PER_NODE": "auto",
    "PET_NNODES": "3",
}
MASTER = {**WORKER_1, "RANK": "0", "PET_NODE_RANK": "0", "HOSTNAME": "pt-master-0"}
# With nprocPerNode: "4" WORLD_SIZE counts ranks (12); RANK stays the pod's index.
WORKER_1_NPROC_4 = {**WORKER_1, "WORLD_SIZE": "12", "PET_NPROC_PER_NODE": "4"}
# A worker that torchrun (or `zerokit launch`) started in that pod: torchrun's, not the pod's.
TORCHRUN_IN_POD = {
    **WORKER_1_NPROC_4,
    "RANK": "9",
    "LOCAL_RANK": "1",
    "LOCAL_WORLD_SIZE": "4",
    "GROUP_RANK": "2",
    "TORCHELASTIC_RUN_ID": "none",
}


@pytest.mark.parametrize(
    ("environ", "expected"),
    [
        (WORKER_1, (2, 0, 3, 1, 2, (), "pt-master-0", 23456)),
        (WORKER_1_NPROC_4, (2, 0, 3, 1, 2, (), "pt-master-0", 23456)),
        (MASTER, (0, 0, 3, 1, 0, (), "pt-master-0", 23456)),
    ],
)  # fmt: skip
def test_table(environ, expected):
    assert KubeflowEnvironment.detect(environ)
    assert observed(KubeflowEnvironment(environ)) == expected


# A rank of an MPIJob (kubeflow/mpi-operator v2beta1, OpenMPI): mpirun in the launcher pod started it over
# ssh on a worker pod, passing on OMPI_MCA_* (the operator's hostfile, on the launcher only) and -x MASTER_ADDR.
MPIJOB_RANK = {
    "OMPI_COMM_WORLD_RANK": "5",
    "OMPI_COMM_WORLD_SIZE": "8",
    "OMPI_COMM_WORLD_LOCAL_RANK": "1",
    "OMPI_COMM_WORLD_LOCAL_SIZE": "4",
    "OMPI_MCA_orte_default_hostfile": "/etc/mpi/hostfile",
    "OMPI_MCA_orte_keep_fqdn_hostnames": "true",
    "MASTER_ADDR": "zerokit-worker-0.zerokit.default.svc",
}


@pytest.mark.parametrize(
    ("environ", "expected"),
    [
        (WORKER_1, KubeflowEnvironment),
        (MPIJOB_RANK, OpenMpiEnvironment),  # an MPIJob is OpenMPI's
        (TORCHRUN_IN_POD, TorchrunEnvironment),  # LOCAL_RANK: a worker of the torchrun the pod started
        ({k: v for k, v in WORKER_1.items() if k != "KUBERNETES_SERVICE_HOST"}, TorchrunEnvironment),  # no pod
        ({**KUBELET, "RANK": "2", "WORLD_SIZE": "3", "MASTER_ADDR": "pt-master-0"}, TorchrunEnvironment),  # < v1.7
        (KUBELET, None),  # any other pod
    ],
)
def test_detection_is_not_confused_with_torchrun(environ, expected):
    found = detect_environment(environ)
    assert type(found) is expected if expected else found is None


def test_an_elastic_job_is_refused():
    with pytest.raises(UserError, match=re.escape("PET_NNODES='1:4' is not a whole number")):
        _ = KubeflowEnvironment({**WORKER_1, "PET_NNODES": "1:4"}).world_size


def test_plan_spawns_the_pods_ranks():
    p = make_plan(["--nproc-per-node", "4", "train"], {**WORKER_1_NPROC_4, "ZEROKIT_LAUNCHER": "kubeflow"})
    assert (p.mode, p.environment, p.nnodes, p.node_rank, p.world_size, p.main_address, p.main_port) == (
        "spawn",
        "kubeflow",
        3,
        2,
        12,
        "pt-master-0",
        23456,
    )
    assert [(c.env["RANK"], c.env["LOCAL_RANK"], c.env["WORLD_SIZE"]) for c in p.commands] == [
        (str(8 + i), str(i), "12") for i in range(4)
    ]


def test_plan_one_rank_per_pod():
    p = make_plan(["train"], WORKER_1)
    assert (p.mode, p.environment, p.world_size, p.node_rank) == ("exec", "kubeflow", 3, 2)
    assert {k: p.commands[0].env[k] for k in ("RANK", "LOCAL_RANK", "WORLD_SIZE", "MASTER_ADDR")} == {
        "RANK": "2",
        "LOCAL_RANK": "0",
        "WORLD_SIZE": "3",
        "MASTER_ADDR": "pt-master-0",
    }


def test_launcher_kubeflow_refuses_a_process_outside_a_pytorchjob():
    with pytest.raises(UserError, match=r"--launcher kubeflow .* expects a rank that Kubeflow PyTorchJob started"):
        make_plan(["--launcher", "kubeflow", "train"], TORCHRUN_IN_POD)
