"""PBS: ranks from the MPI launcher inside the job, hosts from PBS_NODEFILE."""

from __future__ import annotations

import pytest

from zerokit.cluster import PbsEnvironment
from zerokit.foundations.errors import UserError

from .observe import observed, with_files

JOB = {"PBS_JOBID": "1234.pbs01", "PBS_NODENUM": "0", "PBS_VNODENUM": "0", "PBS_TASKNUM": "1"}
NODEFILE = "n1\nn1\nn2\nn2\n"  # one line per slot
OMPI = {
    "OMPI_COMM_WORLD_RANK": "3",
    "OMPI_COMM_WORLD_SIZE": "4",
    "OMPI_COMM_WORLD_LOCAL_RANK": "1",
    "OMPI_COMM_WORLD_LOCAL_SIZE": "2",
}
PALS = {"PMI_RANK": "2", "PMI_SIZE": "4", "PMI_LOCAL_RANK": "0", "PMI_LOCAL_SIZE": "2"}


@pytest.mark.parametrize(
    ("environ", "expected"),
    [
        ({**JOB, **OMPI}, (3, 1, 4, 2, 1, ("n1", "n2"), "n1", 23401)),
        ({**JOB, **PALS, "PBS_JOBID": "55.server"}, (2, 0, 4, 2, 1, ("n1", "n2"), "n1", 20055)),
        ({**JOB, **PALS, "PBS_JOBID": "56[3].server"}, (2, 0, 4, 2, 1, ("n1", "n2"), "n1", 20563)),
    ],
)
def test_table(tmp_path, environ, expected):
    environ = with_files(tmp_path, environ, {"PBS_NODEFILE": NODEFILE})
    assert PbsEnvironment.detect(environ)
    assert observed(PbsEnvironment(environ)) == expected


def test_the_job_script_itself_is_not_a_rank(tmp_path):
    assert not PbsEnvironment.detect(with_files(tmp_path, JOB, {"PBS_NODEFILE": NODEFILE}))
    with pytest.raises(UserError) as err:
        _ = PbsEnvironment(JOB).rank
    assert str(err.value) == (
        "no MPI launcher started this process in the PBS job: start the ranks with `mpiexec` or `mpirun` inside the job"
    )


def test_the_node_file_is_read_only_when_needed(tmp_path):
    environ = {**JOB, **OMPI, "PBS_NODEFILE": str(tmp_path / "on-the-first-node-only")}
    assert PbsEnvironment({**environ, "MASTER_ADDR": "n1"}).main_address == "n1"
    with pytest.raises(UserError, match=r"^cannot read PBS_NODEFILE=.*or pass MASTER_ADDR to every rank$"):
        _ = PbsEnvironment(environ).main_address


def test_an_empty_node_file_gives_the_launchers_way_to_pass_the_address(tmp_path):
    environ = with_files(tmp_path, {**JOB, **OMPI}, {"PBS_NODEFILE": ""})
    with pytest.raises(UserError) as err:
        _ = PbsEnvironment(environ).main_address
    assert str(err.value) == (
        "cannot tell the main address under PBS without a host list (PBS_NODEFILE unset or empty): "
        "pass it with `mpirun -x MASTER_ADDR=<first host>`"
    )
