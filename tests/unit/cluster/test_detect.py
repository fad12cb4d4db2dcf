"""The detection order: the launcher nearest to the process wins."""

from __future__ import annotations

import re

import pytest

import zerokit.cluster
from zerokit.cluster import (
    ENVIRONMENTS,
    FluxEnvironment,
    KubeflowEnvironment,
    LsfEnvironment,
    MpichEnvironment,
    MvapichEnvironment,
    OpenMpiEnvironment,
    PbsEnvironment,
    PmixEnvironment,
    SgeEnvironment,
    SlurmEnvironment,
    TorchrunEnvironment,
    detect_environment,
)
from zerokit.cluster.base import ClusterEnvironment
from zerokit.cluster.batch import MPI_LAUNCHERS
from zerokit.cluster.detect import NAMES, rank_environment
from zerokit.cluster.tools import Tool
from zerokit.foundations.errors import UserError

SRUN = {  # task 5 of `srun -N2 --ntasks-per-node=4`
    "SLURM_JOB_ID": "123456",
    "SLURM_STEP_ID": "0",
    "SLURM_PROCID": "5",
    "SLURM_LOCALID": "1",
    "SLURM_NODEID": "1",
    "SLURM_NTASKS": "8",
    "SLURM_STEP_TASKS_PER_NODE": "4(x2)",
    "SLURM_JOB_NODELIST": "gpu[07-08]",
}
BATCH_SCRIPT = {
    "SLURM_JOB_ID": "123456",
    "SLURM_PROCID": "0",
    "SLURM_LOCALID": "0",
    "SLURM_NODEID": "0",
    "SLURM_NTASKS": "8",
    "SLURM_JOB_NODELIST": "gpu[07-08]",
}
TORCHRUN = {
    "RANK": "13",
    "LOCAL_RANK": "5",
    "WORLD_SIZE": "16",
    "LOCAL_WORLD_SIZE": "8",
    "GROUP_RANK": "1",
    "MASTER_ADDR": "gpu07",
    "MASTER_PORT": "29400",
}
OMPI = {
    "OMPI_COMM_WORLD_RANK": "5",
    "OMPI_COMM_WORLD_SIZE": "8",
    "OMPI_COMM_WORLD_LOCAL_RANK": "1",
    "OMPI_COMM_WORLD_LOCAL_SIZE": "4",
}
# A rank of mpirun on the job's second node inherits its daemon's srun task: task 0 of 1.
ORTED_TASK = {**BATCH_SCRIPT, "SLURM_STEP_ID": "0", "SLURM_NTASKS": "1", "SLURM_STEP_TASKS_PER_NODE": "1"}
PMI = {"PMI_RANK": "5", "PMI_SIZE": "8", "PMI_LOCAL_RANK": "1", "PMI_LOCAL_SIZE": "4"}
HYDRA = {"PMI_RANK": "5", "PMI_SIZE": "8", "MPI_LOCALRANKID": "1", "MPI_LOCALNRANKS": "4"}
MV2 = {
    "MV2_COMM_WORLD_RANK": "5",
    "MV2_COMM_WORLD_SIZE": "8",
    "MV2_COMM_WORLD_LOCAL_RANK": "1",
    "MV2_COMM_WORLD_LOCAL_SIZE": "4",
}
JSRUN = {
    "JSM_NAMESPACE_RANK": "5",
    "JSM_NAMESPACE_SIZE": "8",
    "JSM_NAMESPACE_LOCAL_RANK": "1",
    "JSM_NAMESPACE_LOCAL_SIZE": "4",
}

FLUX_TASK = {
    "FLUX_JOB_ID": "ƒ21",
    "FLUX_JOB_SIZE": "8",
    "FLUX_JOB_NNODES": "2",
    "FLUX_TASK_RANK": "5",
    "FLUX_TASK_LOCAL_ID": "1",
    "FLUX_URI": "local:///tmp/flux-abc/local-1",
    "PMI_RANK": "5",
    "PMI_SIZE": "8",
}
PYTORCHJOB_POD = {
    "KUBERNETES_SERVICE_HOST": "10.96.0.1",
    "MASTER_ADDR": "pt-master-0",
    "MASTER_PORT": "23456",
    "WORLD_SIZE": "3",
    "RANK": "2",
    "PET_NODE_RANK": "2",
    "PET_NNODES": "3",
}


@pytest.mark.parametrize(
    ("environ", "expected"),
    [
        ({}, None),
        ({"HOME": "/home/u", "PATH": "/usr/bin"}, None),
        ({**SRUN, **TORCHRUN}, TorchrunEnvironment),  # torchrun started by srun: its workers are torchrun's
        ({**OMPI, **TORCHRUN}, TorchrunEnvironment),
        ({**BATCH_SCRIPT, **TORCHRUN}, TorchrunEnvironment),  # `zerokit launch` in a batch script
        (BATCH_SCRIPT, None),  # a batch script, no srun
        ({"SLURM_JOB_ID": "123456", "SLURM_JOB_NODELIST": "gpu[07-08]"}, None),
        (SRUN, SlurmEnvironment),
        ({**SRUN, **PMI}, SlurmEnvironment),  # srun --mpi=cray_shasta
        ({**SRUN, "PMIX_RANK": "5", "PMIX_NAMESPACE": "slurm.pmix.123456.0"}, SlurmEnvironment),  # --mpi=pmix
        ({**BATCH_SCRIPT, **OMPI}, OpenMpiEnvironment),  # mpirun in a batch script, a rank on its node
        ({**ORTED_TASK, **OMPI}, OpenMpiEnvironment),  # ... and on another node, under an srun-started daemon
        ({**ORTED_TASK, **HYDRA}, MpichEnvironment),
        (MV2, MvapichEnvironment),
        ({"PMIX_RANK": "5", "PMIX_NAMESPACE": "flux-123"}, PmixEnvironment),
        ({"PBS_JOBID": "1.pbs", "PBS_NODEFILE": "/var/spool/pbs/aux/1.pbs", **PMI}, PbsEnvironment),
        ({"PBS_JOBID": "1.pbs", "PBS_NODEFILE": "/var/spool/pbs/aux/1.pbs"}, None),  # the job script
        ({"JOB_ID": "777", "PE_HOSTFILE": "/sge/pe_hostfile", **OMPI}, SgeEnvironment),
        ({"JOB_ID": "777", **OMPI}, OpenMpiEnvironment),
        ({"LSB_JOBID": "4242", **JSRUN, **OMPI}, LsfEnvironment),
        ({"LSB_JOBID": "4242", **OMPI}, LsfEnvironment),
        (FLUX_TASK, FluxEnvironment),  # its pmi plugin's PMI_RANK and PMI_SIZE too
        ({**FLUX_TASK, **TORCHRUN}, TorchrunEnvironment),
        ({"FLUX_URI": "local:///tmp/flux-abc/local-0"}, None),  # a flux batch script
        (PYTORCHJOB_POD, KubeflowEnvironment),  # RANK and WORLD_SIZE, but no LOCAL_RANK
        ({**PYTORCHJOB_POD, **TORCHRUN}, TorchrunEnvironment),  # a worker of torchrun in that pod
    ],
)
def test_detection_order(environ, expected):
    env = detect_environment(environ)
    assert type(env) is expected if expected else env is None
    if env is not None:
        assert dict(env.environ) == environ


def test_the_detected_environment_reads_the_right_launcher():
    env = detect_environment({**ORTED_TASK, **OMPI})
    assert (env.rank, env.local_rank, env.world_size, env.local_world_size) == (5, 1, 8, 4)
    assert env.hosts == ("gpu07", "gpu08")


def test_every_environment_is_in_the_order_once_with_its_own_name():
    exported = {
        value
        for value in vars(zerokit.cluster).values()
        if isinstance(value, type) and issubclass(value, ClusterEnvironment) and value is not ClusterEnvironment
    }
    assert set(ENVIRONMENTS) == exported
    assert len(ENVIRONMENTS) == len(exported)
    assert len({env.name for env in ENVIRONMENTS}) == len(ENVIRONMENTS)


@pytest.mark.parametrize("env", ENVIRONMENTS, ids=NAMES)
def test_every_environment_says_its_job_variables_and_multi_node_tools(env):
    """In its own class: doctor reads them, and a new scheduler must never inherit another's tools."""
    assert {"job_variables", "multi_node_tools"} <= set(vars(env))
    assert all(isinstance(variable, str) and variable for variable in env.job_variables)
    assert all(isinstance(tool, Tool) and tool.fix for tool in env.multi_node_tools)


def test_an_environment_that_does_not_say_gets_no_default():
    class Unsaid(ClusterEnvironment):
        name = "unsaid"

    assert not hasattr(Unsaid, "job_variables")
    assert not hasattr(Unsaid, "multi_node_tools")


def test_batch_jobs_look_for_mpi_launchers_in_the_detection_order():
    assert [env for env in ENVIRONMENTS if env in MPI_LAUNCHERS] == list(MPI_LAUNCHERS)


@pytest.mark.parametrize(
    ("environ", "message"),
    [
        (
            {"PMI_RANK": "1", "PMI_SIZE": "2"},
            "PMI_RANK=1 says this process is one of several MPICH ranks, but the rest of MPICH's variables do not "
            "(unset: MPI_LOCALRANKID or PMI_LOCAL_RANK, MPI_LOCALNRANKS or PMI_LOCAL_SIZE): start the ranks with "
            "`mpiexec` and leave the PMI_* variables to it, or unset PMI_RANK to run this process alone",
        ),
        ({"OMPI_COMM_WORLD_SIZE": "2"}, "OMPI_COMM_WORLD_SIZE=2 says this process is one of several OpenMPI"),
        ({"MV2_COMM_WORLD_RANK": "3"}, "MV2_COMM_WORLD_RANK=3 says this process is one of several MVAPICH"),
        ({"WORLD_SIZE": "8", "LOCAL_RANK": "0"}, "WORLD_SIZE=8 says this process is one of several torchrun"),
        ({**BATCH_SCRIPT, "SLURM_PROCID": "2"}, "SLURM_PROCID=2 says this process is one of several Slurm ranks"),
    ],
)
def test_half_set_rank_variables_are_refused_naming_the_missing_ones(environ, message):
    with pytest.raises(UserError, match=re.escape(message)):
        rank_environment(environ)


@pytest.mark.parametrize(
    "environ",
    [
        {},
        BATCH_SCRIPT,  # a batch script: SLURM_NTASKS of the job, task 0 of no step
        {"PBS_JOBID": "1.pbs", "PBS_NODEFILE": "/var/spool/pbs/aux/1.pbs"},
        {"OMPI_COMM_WORLD_SIZE": "1", "PMI_RANK": "0", "RANK": "0"},  # a world of one says nothing more
        {"WORLD_SIZE": "lots"},
    ],
)
def test_a_lone_process_stays_one(environ):
    assert rank_environment(environ) is None


def test_a_detected_environment_is_returned_as_detect_finds_it():
    assert type(rank_environment(SRUN)) is SlurmEnvironment


def test_only_what_every_rank_needs_is_named_as_unset():
    with pytest.raises(UserError) as raised:
        rank_environment({"RANK": "1"})
    assert "(unset: LOCAL_RANK, WORLD_SIZE, LOCAL_WORLD_SIZE or LOCAL_SIZE)" in str(raised.value)
