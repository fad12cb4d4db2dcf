"""OpenMPI's mpirun: hosts from a hostfile named in the environment, or from the Slurm job around it."""

from __future__ import annotations

import pytest

from zerokit.cluster import OpenMpiEnvironment
from zerokit.foundations.errors import UserError

from .observe import observed, with_files

MPIRUN = {  # rank 5 of `mpirun -np 8 --map-by ppr:4:node`
    "OMPI_COMM_WORLD_RANK": "5",
    "OMPI_COMM_WORLD_SIZE": "8",
    "OMPI_COMM_WORLD_LOCAL_RANK": "1",
    "OMPI_COMM_WORLD_LOCAL_SIZE": "4",
    "OMPI_COMM_WORLD_NODE_RANK": "3",  # a local rank across jobs, not the node index: never read
}
IN_SLURM_JOB = {"SLURM_JOB_ID": "98765", "SLURM_JOB_NODELIST": "c[1-2]", "SLURM_PROCID": "0"}


@pytest.mark.parametrize(
    ("environ", "files", "expected"),
    [
        (
            MPIRUN,
            {"OMPI_MCA_orte_default_hostfile": "node-a slots=4\nnode-b slots=4\n"},
            (5, 1, 8, 4, 1, ("node-a", "node-b"), "node-a", 29500),
        ),
        (
            MPIRUN,
            {"PRTE_MCA_prte_default_hostfile": "node-c\nnode-d\n"},
            (5, 1, 8, 4, 1, ("node-c", "node-d"), "node-c", 29500),
        ),
        ({**MPIRUN, **IN_SLURM_JOB}, {}, (5, 1, 8, 4, 1, ("c1", "c2"), "c1", 22765)),
        ({**MPIRUN, "MASTER_ADDR": "10.1.1.1"}, {}, (5, 1, 8, 4, 1, (), "10.1.1.1", 29500)),
    ],
)
def test_table(tmp_path, environ, files, expected):
    environ = with_files(tmp_path, environ, files)
    assert OpenMpiEnvironment.detect(environ)
    assert observed(OpenMpiEnvironment(environ)) == expected


def test_without_hosts_the_message_says_how_to_pass_the_address():
    with pytest.raises(UserError) as err:
        _ = OpenMpiEnvironment(MPIRUN).main_address
    assert str(err.value) == (
        "cannot tell the main address under OpenMPI without a host list (no hostfile in "
        "OMPI_MCA_orte_default_hostfile or PRTE_MCA_prte_default_hostfile, and no Slurm job): "
        "pass it with `mpirun -x MASTER_ADDR=<first host>`"
    )


def test_round_robin_placement_has_no_node_rank():
    env = OpenMpiEnvironment({**MPIRUN, "OMPI_COMM_WORLD_RANK": "1", "OMPI_COMM_WORLD_LOCAL_RANK": "0"})
    assert env.rank == 1
    with pytest.raises(UserError, match=r"place them with `mpirun --map-by ppr:<ranks per node>:node`$"):
        _ = env.node_rank


def test_a_bad_size_is_named():
    with pytest.raises(UserError, match=r"^OMPI_COMM_WORLD_SIZE='eight' is not a whole number: start the ranks"):
        _ = OpenMpiEnvironment({**MPIRUN, "OMPI_COMM_WORLD_SIZE": "eight"}).world_size


@pytest.mark.parametrize("missing", ["OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_LOCAL_SIZE"])
def test_detect_needs_every_variable(missing):
    assert OpenMpiEnvironment.detect(MPIRUN)
    assert not OpenMpiEnvironment.detect({k: v for k, v in MPIRUN.items() if k != missing})
