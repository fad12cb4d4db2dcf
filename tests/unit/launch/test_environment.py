"""The rank variables of a process: a lone rank only where nothing says it is one of several."""

from __future__ import annotations

import socket

import pytest

from zerokit.cluster import SlurmEnvironment
from zerokit.foundations.errors import UserError
from zerokit.launch.environment import check_port_free, ensure_rank_env, launch_environment

SRUN = {"SLURM_PROCID": "1", "SLURM_LOCALID": "1", "SLURM_NTASKS": "2", "SLURM_NTASKS_PER_NODE": "2"}
SRUN |= {"SLURM_NODEID": "0", "SLURM_STEP_ID": "0", "SLURM_JOB_ID": "7", "SLURM_JOB_NODELIST": "n1"}


def test_alone_this_process_is_rank_0_of_1():
    environ: dict[str, str] = {}
    ensure_rank_env(environ)
    assert {k: environ[k] for k in ("RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "MASTER_ADDR")} == {
        "RANK": "0",
        "LOCAL_RANK": "0",
        "WORLD_SIZE": "1",
        "LOCAL_WORLD_SIZE": "1",
        "MASTER_ADDR": "127.0.0.1",
    }
    assert 1 <= int(environ["MASTER_PORT"]) <= 65535


@pytest.mark.parametrize(
    "environ",
    [{"PMI_RANK": "1", "PMI_SIZE": "2"}, {"OMPI_COMM_WORLD_SIZE": "2"}, {"RANK": "3"}, {"WORLD_SIZE": "4"}],
)
def test_half_set_rank_variables_are_refused_not_taken_for_a_lone_rank(environ):
    before = dict(environ)
    with pytest.raises(UserError, match="says this process is one of several"):
        ensure_rank_env(environ)
    assert environ == before


def test_an_explicit_port_in_use_is_refused_for_a_lone_rank():
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        port = holder.getsockname()[1]
        with pytest.raises(UserError, match=f"port {port} cannot be used .*: set MASTER_PORT to a free port"):
            ensure_rank_env({"MASTER_PORT": str(port)})
        with pytest.raises(UserError, match="fix it so"):
            check_port_free(port, "fix it so")


def test_a_port_left_in_time_wait_passes():
    """A port an earlier run's store left in TIME_WAIT is usable (rank 0's store binds with SO_REUSEADDR)."""
    with socket.socket() as listener:
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as the store's (its connections inherit it)
        listener.bind(("0.0.0.0", 0))
        listener.listen()
        port = listener.getsockname()[1]
        with socket.create_connection(("127.0.0.1", port)):
            accepted, _ = listener.accept()
            accepted.close()  # this side closes first: its end of the connection waits in TIME_WAIT
    with socket.socket() as plain, pytest.raises(OSError, match="in use"):
        plain.bind(("0.0.0.0", port))  # the premise: without SO_REUSEADDR the port is still taken
    check_port_free(port, "unused")  # raises UserError if the port were refused


def test_a_required_scheduler_must_have_started_this_process():
    assert isinstance(launch_environment(SRUN, "slurm"), SlurmEnvironment)
    with pytest.raises(UserError, match=r"--launcher openmpi .* OpenMPI's variables are not set here: start the"):
        launch_environment(SRUN, "openmpi")
    assert launch_environment({}, None) is None
