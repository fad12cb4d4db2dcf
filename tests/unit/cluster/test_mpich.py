"""MPICH / Intel MPI (Hydra) and Cray PALS: PMI_RANK, PMI_SIZE and the local rank and size."""

from __future__ import annotations

import pytest

from zerokit.cluster import MpichEnvironment
from zerokit.foundations.errors import UserError

from .observe import observed, with_files

HYDRA = {"PMI_RANK": "3", "PMI_SIZE": "4", "MPI_LOCALRANKID": "1", "MPI_LOCALNRANKS": "2"}
PALS = {"PMI_RANK": "2", "PMI_SIZE": "4", "PMI_LOCAL_RANK": "0", "PMI_LOCAL_SIZE": "2"}
SRUN_STEP = {  # task 3 of `srun -N2 --ntasks-per-node=2`
    "SLURM_JOB_ID": "555",
    "SLURM_STEP_ID": "0",
    "SLURM_PROCID": "3",
    "SLURM_LOCALID": "1",
    "SLURM_NODEID": "1",
    "SLURM_NTASKS": "4",
    "SLURM_STEP_TASKS_PER_NODE": "2(x2)",
    "SLURM_JOB_NODELIST": "n[1-2]",
}
# Rank 3 of `mpiexec -n 4 -ppn 2` in a Slurm job: its proxy on node 2 is task 1 of an srun step.
PROXY_STEP = {
    **SRUN_STEP,
    "SLURM_PROCID": "1",
    "SLURM_LOCALID": "0",
    "SLURM_NTASKS": "2",
    "SLURM_STEP_TASKS_PER_NODE": "1(x2)",
}


@pytest.mark.parametrize(
    ("environ", "files", "expected"),
    [
        (HYDRA, {"HYDRA_HOST_FILE": "h1:2\nh2:2\n"}, (3, 1, 4, 2, 1, ("h1", "h2"), "h1", 29500)),
        (HYDRA, {"I_MPI_HYDRA_HOST_FILE": "h3\nh4\n"}, (3, 1, 4, 2, 1, ("h3", "h4"), "h3", 29500)),
        ({**PALS, "MASTER_ADDR": "x1000c0s0b0n0"}, {}, (2, 0, 4, 2, 1, (), "x1000c0s0b0n0", 29500)),
        ({**HYDRA, **PROXY_STEP}, {}, (3, 1, 4, 2, 1, ("n1", "n2"), "n1", 20555)),
    ],
)
def test_table(tmp_path, environ, files, expected):
    environ = with_files(tmp_path, environ, files)
    assert MpichEnvironment.detect(environ)
    assert observed(MpichEnvironment(environ)) == expected


@pytest.mark.parametrize(
    "environ",
    [
        # srun --mpi=cray_shasta sets PMI_* that agree with SLURM_*: srun is the launcher
        {**SRUN_STEP, "PMI_RANK": "3", "PMI_SIZE": "4", "PMI_LOCAL_RANK": "1", "PMI_LOCAL_SIZE": "2"},
        # srun --mpi=pmi2 sets the rank and size only
        {**SRUN_STEP, "PMI_RANK": "3", "PMI_SIZE": "4"},
    ],
)
def test_pmi_variables_that_srun_set_are_not_mpich(environ):
    assert not MpichEnvironment.detect(environ)


def test_without_hosts_the_message_says_how_to_pass_the_address():
    with pytest.raises(UserError) as err:
        _ = MpichEnvironment(HYDRA).main_address
    assert str(err.value) == (
        "cannot tell the main address under MPICH without a host list (no host file in HYDRA_HOST_FILE or "
        "I_MPI_HYDRA_HOST_FILE, and no Slurm job): pass it with `mpiexec -genv MASTER_ADDR <first host>`"
    )


def test_round_robin_placement_has_no_node_rank():
    env = MpichEnvironment({**HYDRA, "PMI_RANK": "1", "MPI_LOCALRANKID": "0"})
    with pytest.raises(UserError, match=r"place them with `mpiexec -ppn <ranks per node>`$"):
        _ = env.node_rank


def test_a_bad_local_rank_is_named():
    with pytest.raises(UserError, match=r"^MPI_LOCALRANKID='-1' is not a whole number"):
        _ = MpichEnvironment({**HYDRA, "MPI_LOCALRANKID": "-1"}).local_rank
