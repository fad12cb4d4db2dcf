"""SGE / UGE / AGE (ABCI): ranks from the MPI launcher, hosts from PE_HOSTFILE or SGE_JOB_HOSTLIST."""

from __future__ import annotations

import pytest

from zerokit.cluster import SgeEnvironment
from zerokit.foundations.errors import UserError

from .observe import observed, with_files

JOB = {"JOB_ID": "777", "SGE_TASK_ID": "undefined", "NSLOTS": "8", "SGE_ROOT": "/opt/sge"}
PE_HOSTFILE = "g0001 4 gpu@g0001 UNDEFINED\ng0002 4 gpu@g0002 UNDEFINED\n"
OMPI = {
    "OMPI_COMM_WORLD_RANK": "5",
    "OMPI_COMM_WORLD_SIZE": "8",
    "OMPI_COMM_WORLD_LOCAL_RANK": "1",
    "OMPI_COMM_WORLD_LOCAL_SIZE": "4",
}
HYDRA = {"PMI_RANK": "4", "PMI_SIZE": "8", "MPI_LOCALRANKID": "0", "MPI_LOCALNRANKS": "4"}


@pytest.mark.parametrize(
    ("environ", "files", "expected"),
    [
        ({**JOB, **OMPI}, {"PE_HOSTFILE": PE_HOSTFILE}, (5, 1, 8, 4, 1, ("g0001", "g0002"), "g0001", 20777)),
        (  # ABCI's plain host list; an array task
            {**JOB, **HYDRA, "SGE_TASK_ID": "3"},
            {"SGE_JOB_HOSTLIST": "g0003\ng0004\n"},
            (4, 0, 8, 4, 1, ("g0003", "g0004"), "g0003", 27773),
        ),
    ],
)
def test_table(tmp_path, environ, files, expected):
    environ = with_files(tmp_path, environ, files)
    assert SgeEnvironment.detect(environ)
    assert observed(SgeEnvironment(environ)) == expected


@pytest.mark.parametrize(("task", "job_id"), [("undefined", "777"), ("3", "777.3"), ("", "777")])
def test_an_array_task_has_its_own_job_id(task, job_id):
    assert SgeEnvironment({**JOB, **OMPI, "SGE_TASK_ID": task}).job_id == job_id


def test_job_id_alone_is_not_sge():
    assert not SgeEnvironment.detect({"JOB_ID": "777", **OMPI})


def test_without_a_host_file_the_message_says_how_to_pass_the_address():
    with pytest.raises(UserError) as err:
        _ = SgeEnvironment({**JOB, **HYDRA}).main_address
    assert str(err.value) == (
        "cannot tell the main address under SGE without a host list (PE_HOSTFILE and SGE_JOB_HOSTLIST unset or "
        "empty): pass it with `mpiexec -genv MASTER_ADDR <first host>`"
    )
