"""Peers' own cases, run against zerokit's classes: Lightning's environment tests and torchrun's contract.

Each case is restated as data (the variables in, what the peer expects out) from the file named above it, in
Lightning-AI/pytorch-lightning (tests/tests_fabric/plugins/environments/) or torch/distributed/run.py. Where
zerokit answers otherwise on purpose, the case says `differs` and asserts zerokit's answer; each such
difference is listed, with its reason, in docs/launch.md ("Where zerokit differs from Lightning").
"""

from __future__ import annotations

import pytest

from zerokit.cluster import (
    KubeflowEnvironment,
    LsfEnvironment,
    OpenMpiEnvironment,
    SlurmEnvironment,
    TorchrunEnvironment,
    detect_environment,
)
from zerokit.cluster.base import RankEnv
from zerokit.cluster.detect import several_ranks_marker
from zerokit.foundations.errors import UserError

from .observe import with_files

# --- test_slurm.py ------------------------------------------------------------------------------------------

# test_main_address_from_slurm_node_list: SLURM_NODELIST -> the main address (its first host). The whole host
# list is zerokit's addition: no entry keeps a space, and the zero-padding of 089 stays, as in Slurm.
SLURM_NODE_LISTS = [
    ("127.0.0.1", ("127.0.0.1",)),
    ("alpha", ("alpha",)),
    ("alpha,beta,gamma", ("alpha", "beta", "gamma")),
    ("alpha beta gamma", ("alpha", "beta", "gamma")),
    ("1.2.3.[100-110]", tuple(f"1.2.3.{n}" for n in range(100, 111))),
    ("1.2.3.[089, 100-110]", ("1.2.3.089", *(f"1.2.3.{n}" for n in range(100, 111)))),
    ("host[22]", ("host22",)),
    ("host[1,5-9]", ("host1", "host5", "host6", "host7", "host8", "host9")),
    ("host[5-9,1]", ("host5", "host6", "host7", "host8", "host9", "host1")),
    ("alpha, host[5-9], gamma", ("alpha", "host5", "host6", "host7", "host8", "host9", "gamma")),
    ("alpha[3,1], beta", ("alpha3", "alpha1", "beta")),
]


@pytest.mark.parametrize(("node_list", "hosts"), SLURM_NODE_LISTS)
def test_slurm_node_lists(node_list: str, hosts: tuple[str, ...]):
    env = SlurmEnvironment({"SLURM_NODELIST": node_list})
    assert env.hosts == hosts and env.main_address == hosts[0]


# test_attributes_from_environment_variables
SLURM_JOB = {
    "SLURM_NODELIST": "1.1.1.1, 1.1.1.2",
    "SLURM_JOB_ID": "0001234",
    "SLURM_NTASKS": "20",
    "SLURM_NTASKS_PER_NODE": "10",
    "SLURM_LOCALID": "2",
    "SLURM_PROCID": "1",
    "SLURM_NODEID": "3",
    "SLURM_JOB_NAME": "JOB",
}


def test_slurm_attributes():
    env = SlurmEnvironment(SLURM_JOB)
    assert (env.main_address, env.world_size, env.rank, env.local_rank, env.node_rank) == ("1.1.1.1", 20, 1, 2, 3)
    assert env.main_port == 20000 + 1234  # differs: Lightning's is 15000 + 1234 (port base)
    assert env.job_id == "0001234"  # differs: Lightning's is the int 1234 (job id kept as Slurm wrote it)


def test_slurm_defaults():
    """test_default_attributes: no variables at all."""
    env = SlurmEnvironment({})
    for field in ("world_size", "local_rank", "node_rank"):
        with pytest.raises(UserError):
            getattr(env, field)
    with pytest.raises(UserError, match="without a host list"):
        _ = env.main_address  # differs: Lightning's is 127.0.0.1 (no loopback guess on a cluster)
    assert env.main_port == 29500  # differs: Lightning's is 12910 (torch's default port)
    assert env.job_id is None


@pytest.mark.parametrize(
    ("environ", "slurm"),
    [
        ({}, False),
        ({"SLURM_JOB_NAME": "bash"}, False),
        ({"SLURM_NTASKS": "2"}, False),  # differs: Lightning detects it (a batch script is no rank)
    ],
)
def test_slurm_detection(environ: dict[str, str], slurm: bool):
    """test_detect."""
    assert SlurmEnvironment.detect(environ) is slurm


def test_slurm_tasks_without_srun():
    """test_srun_variable_validation: SLURM_NTASKS=2 outside srun. differs: Lightning raises; here it is the
    batch script (or a launcher in it), which starts the ranks; none is run alone as rank 0 of 1."""
    assert several_ranks_marker({"SLURM_NTASKS": "2"}) is None
    assert several_ranks_marker({"SLURM_NTASKS": "2", "SLURM_PROCID": "1"}) is not None


# --- test_torchelastic.py and torchrun's contract -----------------------------------------------------------

TORCHELASTIC = {"MASTER_ADDR": "1.2.3.4", "MASTER_PORT": "500", "WORLD_SIZE": "20", "RANK": "1", "LOCAL_RANK": "2"}


def test_torchelastic_attributes():
    """test_attributes_from_environment_variables, with LOCAL_WORLD_SIZE, which torchrun sets for every worker
    (torch/distributed/run.py). differs: without it the local rank cannot be checked and is refused."""
    env = TorchrunEnvironment({**TORCHELASTIC, "GROUP_RANK": "3", "LOCAL_WORLD_SIZE": "4"})
    assert (env.main_address, env.main_port, env.world_size, env.rank, env.local_rank, env.node_rank) == (
        "1.2.3.4",
        500,
        20,
        1,
        2,
        3,
    )
    with pytest.raises(UserError, match="LOCAL_WORLD_SIZE"):
        _ = TorchrunEnvironment({**TORCHELASTIC, "GROUP_RANK": "3"}).local_rank


def test_torchelastic_defaults():
    """test_default_attributes: no variables at all."""
    env = TorchrunEnvironment({})
    for field in ("world_size", "local_rank"):
        with pytest.raises(UserError):
            getattr(env, field)
    with pytest.raises(UserError):
        _ = env.node_rank  # differs: Lightning's is 0 (derived from RANK, which is not set)
    with pytest.raises(UserError, match="MASTER_ADDR"):
        _ = env.main_address  # differs: Lightning's is 127.0.0.1
    assert env.main_port == 29500  # differs: Lightning's is 12910


@pytest.mark.parametrize(
    ("environ", "torchrun"),
    [
        ({}, False),
        ({"TORCHELASTIC_RUN_ID": ""}, False),  # differs: Lightning detects it (no rank in it)
    ],
)
def test_torchelastic_detection(environ: dict[str, str], torchrun: bool):
    """test_detect."""
    assert TorchrunEnvironment.detect(environ) is torchrun


# torch/distributed/run.py, "Environment Variables": what torchrun sets in each worker (node 1 of 2, 4 each).
TORCHRUN_WORKER = {
    "LOCAL_RANK": "3",
    "RANK": "7",
    "GROUP_RANK": "1",
    "ROLE_RANK": "7",
    "LOCAL_WORLD_SIZE": "4",
    "WORLD_SIZE": "8",
    "ROLE_WORLD_SIZE": "8",
    "MASTER_ADDR": "node0.example",
    "MASTER_PORT": "29400",
    "TORCHELASTIC_RESTART_COUNT": "0",
    "TORCHELASTIC_MAX_RESTARTS": "0",
    "TORCHELASTIC_RUN_ID": "job42",
}


def test_a_torchrun_worker_is_read_as_torchrun_says():
    env = detect_environment(TORCHRUN_WORKER)
    assert isinstance(env, TorchrunEnvironment)
    assert env.rank_env() == RankEnv(7, 3, 8, 4, 1, "node0.example", 29400)
    assert env.job_id == "job42"
    assert TorchrunEnvironment({**TORCHRUN_WORKER, "TORCHELASTIC_RUN_ID": "none"}).job_id is None  # no --rdzv-id


def test_what_zerokit_gives_each_rank_is_torchruns_contract():
    """Every variable a rank gets from zerokit has the meaning torchrun gives it (LOCAL_SIZE: DeepSpeed's)."""
    given = RankEnv(7, 3, 8, 4, 1, "node0.example", 29400).variables()
    assert {k: v for k, v in given.items() if k != "LOCAL_SIZE"} == {
        k: TORCHRUN_WORKER[k]
        for k in ("RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "GROUP_RANK", "MASTER_ADDR", "MASTER_PORT")
    }


# --- test_kubeflow.py ---------------------------------------------------------------------------------------

# test_attributes_from_environment_variables: one process per pod, 20 pods. The training operator (v1.7+)
# sets PET_NODE_RANK = RANK and PET_NNODES with them, and every pod has KUBERNETES_SERVICE_HOST.
KUBEFLOW_POD = {
    "KUBERNETES_PORT": "tcp://127.0.0.1:443",
    "MASTER_ADDR": "1.2.3.4",
    "MASTER_PORT": "500",
    "WORLD_SIZE": "20",
    "RANK": "1",
}
OPERATOR = {"KUBERNETES_SERVICE_HOST": "10.0.0.1", "PET_NODE_RANK": "1", "PET_NNODES": "20"}


def test_kubeflow_attributes():
    env = KubeflowEnvironment({**KUBEFLOW_POD, **OPERATOR})
    assert KubeflowEnvironment.detect({**KUBEFLOW_POD, **OPERATOR})
    assert (env.main_address, env.main_port, env.world_size, env.rank, env.local_rank, env.node_rank) == (
        "1.2.3.4",
        500,
        20,
        1,
        0,
        1,
    )
    # differs: without the operator's PET_* it is no PyTorchJob pod to zerokit, but a torchrun worker
    assert not KubeflowEnvironment.detect(KUBEFLOW_POD)
    assert isinstance(detect_environment(KUBEFLOW_POD), TorchrunEnvironment)


def test_kubeflow_defaults():
    """test_default_attributes: no variables at all."""
    env = KubeflowEnvironment({})
    for field in ("main_address", "world_size", "rank"):
        with pytest.raises(UserError):
            getattr(env, field)
    assert env.local_rank == 0
    assert env.main_port == 29500  # differs: Lightning raises without MASTER_PORT


# --- test_lsf.py --------------------------------------------------------------------------------------------

LSF_RANKFILE = "batch\n10.10.10.0\n10.10.10.1\n10.10.10.2\n10.10.10.3"  # the launch node first
# jsrun sets JSM_NAMESPACE_LOCAL_SIZE too; Lightning's case leaves it out (2 here: ranks 2-3 share a node).
JSRUN = {"JSM_NAMESPACE_SIZE": "4", "JSM_NAMESPACE_RANK": "3", "JSM_NAMESPACE_LOCAL_RANK": "1"}
JSRUN_LOCAL_SIZE = {"JSM_NAMESPACE_LOCAL_SIZE": "2"}


def test_lsf_attributes(tmp_path):
    """test_attributes_from_environment_variables, test_manual_main_port_and_address and test_node_rank. The
    host list is LSB_DJOB_HOSTFILE here (differs: Lightning reads LSB_DJOB_RANKFILE; both list the launch
    node first)."""
    environ = with_files(
        tmp_path, {"LSB_JOBID": "1234", **JSRUN, **JSRUN_LOCAL_SIZE}, {"LSB_DJOB_HOSTFILE": LSF_RANKFILE}
    )
    env = LsfEnvironment(environ)
    assert LsfEnvironment.detect(environ)
    assert (env.main_address, env.world_size, env.rank, env.local_rank) == ("10.10.10.0", 4, 3, 1)
    assert env.main_port == 20000 + 1234  # differs: Lightning's is 10000 + 1234
    assert env.node_rank == 1  # differs: Lightning's is 2, its host name's place in the file; here rank // 2


@pytest.mark.parametrize("hostfile", [None, ""])
def test_lsf_without_a_host_list(tmp_path, hostfile: str | None):
    """test_missing_lsb_djob_rankfile, test_empty_lsb_djob_rankfile: no main address (asked, not at start)."""
    environ = {"LSB_JOBID": "1234", **JSRUN, **JSRUN_LOCAL_SIZE}
    if hostfile is not None:
        environ["LSB_DJOB_HOSTFILE"] = hostfile
    with pytest.raises(UserError, match="without a host list"):
        _ = LsfEnvironment(environ).main_address


def test_lsf_without_a_job_id(tmp_path):
    """test_missing_lsb_job_id. differs: Lightning raises; without LSB_JOBID this is no LSF job here."""
    environ = with_files(tmp_path, {**JSRUN, **JSRUN_LOCAL_SIZE}, {"LSB_DJOB_HOSTFILE": LSF_RANKFILE})
    assert not LsfEnvironment.detect(environ)


@pytest.mark.parametrize(
    ("environ", "lsf"),
    [
        ({}, False),
        # differs: Lightning detects these four names, empty; here jsrun's rank and local size must be set too
        ({"LSB_DJOB_RANKFILE": "", "LSB_JOBID": "", "JSM_NAMESPACE_SIZE": "", "JSM_NAMESPACE_LOCAL_RANK": ""}, False),
    ],
)
def test_lsf_detection(environ: dict[str, str], lsf: bool):
    """test_detect."""
    assert LsfEnvironment.detect(environ) is lsf


# --- test_mpi.py (mpi4py's communicators there; the launcher's variables here, OpenMPI's) -------------------


def ompi(rank: int, local_rank: int, size: int, local_size: int) -> dict[str, str]:
    values = (rank, local_rank, size, local_size)
    names = ("RANK", "LOCAL_RANK", "SIZE", "LOCAL_SIZE")
    return {f"OMPI_COMM_WORLD_{name}": str(value) for name, value in zip(names, values, strict=True)}


@pytest.mark.parametrize(("rank", "node_rank"), [(0, 0), (1, 0), (2, 1), (3, 1)])
def test_mpi_node_rank(rank: int, node_rank: int):
    """test_init_local_comm: 4 ranks on host1 and host2 -> the node index of each."""
    assert OpenMpiEnvironment(ompi(rank, rank % 2, 4, 2)).node_rank == node_rank


def test_mpi_world():
    """test_world_comm: a world of 8, rank 3."""
    env = OpenMpiEnvironment(ompi(3, 3, 8, 8))
    assert (env.world_size, env.rank, env.local_rank) == (8, 3, 3)


@pytest.mark.parametrize(("size", "mpi"), [(2, True), (1, True)])  # differs at 1: Lightning's is not MPI
def test_mpi_detection(size: int, mpi: bool):
    """test_detect: the world sizes 1 and 2 (0 is no world mpirun makes)."""
    assert OpenMpiEnvironment.detect(ompi(0, 0, size, size)) is mpi
