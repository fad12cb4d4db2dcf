"""LSF: ranks from jsrun or the MPI launcher, hosts from LSB_DJOB_HOSTFILE (without jsrun's launch node)."""

from __future__ import annotations

import pytest

from zerokit.cluster import LsfEnvironment
from zerokit.foundations.errors import UserError

from .observe import observed, with_files

JOB = {"LSB_JOBID": "4242", "LSB_JOBINDEX": "0"}
JSRUN = {
    "JSM_NAMESPACE_RANK": "3",
    "JSM_NAMESPACE_SIZE": "4",
    "JSM_NAMESPACE_LOCAL_RANK": "1",
    "JSM_NAMESPACE_LOCAL_SIZE": "2",
}
OMPI = {
    "OMPI_COMM_WORLD_RANK": "2",
    "OMPI_COMM_WORLD_SIZE": "4",
    "OMPI_COMM_WORLD_LOCAL_RANK": "0",
    "OMPI_COMM_WORLD_LOCAL_SIZE": "2",
}
CSM_HOSTFILE = "batch3\na01n06\na01n06\na01n07\na01n07\n"  # the launch node first, then a line per slot


@pytest.mark.parametrize(
    ("environ", "files", "expected"),
    [
        (  # jsrun on a CSM system: the launch node is left out; jsrun's numbers win over Spectrum MPI's
            {**JOB, **JSRUN, **OMPI},
            {"LSB_DJOB_HOSTFILE": CSM_HOSTFILE},
            (3, 1, 4, 2, 1, ("a01n06", "a01n07"), "a01n06", 24242),
        ),
        (  # mpirun in an ordinary LSF job: the first host is a compute host
            {**JOB, **OMPI},
            {"LSB_DJOB_HOSTFILE": "h1\nh1\nh2\nh2\n"},
            (2, 0, 4, 2, 1, ("h1", "h2"), "h1", 24242),
        ),
        ({**JOB, **OMPI, "LSB_MCPU_HOSTS": "h1 2 h2 2"}, {}, (2, 0, 4, 2, 1, ("h1", "h2"), "h1", 24242)),
        (
            {**JOB, **OMPI, "LSB_JOBINDEX": "7"},
            {"LSB_DJOB_HOSTFILE": "h1\nh2\n"},
            (2, 0, 4, 2, 1, ("h1", "h2"), "h1", 26427),
        ),
    ],
)
def test_table(tmp_path, environ, files, expected):
    environ = with_files(tmp_path, environ, files)
    assert LsfEnvironment.detect(environ)
    assert observed(LsfEnvironment(environ)) == expected


@pytest.mark.parametrize(("index", "job_id"), [("0", "4242"), ("7", "4242[7]"), ("", "4242")])
def test_an_array_element_has_its_own_job_id(index, job_id):
    assert LsfEnvironment({**JOB, **OMPI, "LSB_JOBINDEX": index}).job_id == job_id


def test_the_job_script_itself_is_not_a_rank():
    assert not LsfEnvironment.detect({**JOB, "LSB_DJOB_HOSTFILE": "/tmp/x", "LSB_MCPU_HOSTS": "h1 2"})


def test_jsrun_node_rank_needs_blocks():
    env = LsfEnvironment({**JOB, **JSRUN, "JSM_NAMESPACE_RANK": "1", "JSM_NAMESPACE_LOCAL_RANK": "0"})
    with pytest.raises(UserError, match=r"^cannot tell the node rank under jsrun: .*consecutive ranks on every host$"):
        _ = env.node_rank


def test_without_hosts_the_message_says_how_to_pass_the_address():
    with pytest.raises(UserError) as err:
        _ = LsfEnvironment({**JOB, **JSRUN}).main_address
    assert str(err.value) == (
        "cannot tell the main address under LSF without a host list (LSB_DJOB_HOSTFILE and LSB_MCPU_HOSTS unset "
        "or empty): pass it with `export MASTER_ADDR=<first host>` before `jsrun`"
    )
