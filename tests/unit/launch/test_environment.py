"""The rank variables of a process: a lone rank only where nothing says it is one of several."""

from __future__ import annotations

import socket

import pytest

from zerokit.cluster import SlurmEnvironment
from zerokit.foundations.errors import UserError
from zerokit.launch.config import parse
from zerokit.launch.plan import plan
from zerokit.launch.rank.environment import check_port_free, deepspeed_arch_env, ensure_rank_env, launch_environment

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


@pytest.mark.parametrize(
    ("given", "for_the_ranks"),
    [
        ("9.0a", "9.0"),
        ("8.0;9.0a", "8.0;9.0"),
        ("10.0f 9.0", "9.0;10.0"),
        ("sm_90a", "9.0"),
        ("sm_80;compute_90", "8.0;9.0+PTX"),
    ],
)
def test_an_arch_list_deepspeed_cannot_read_is_made_one_it_can_with_a_note(given: str, for_the_ranks: str):
    env, note = deepspeed_arch_env({"TORCH_CUDA_ARCH_LIST": given})
    assert env == {"TORCH_CUDA_ARCH_LIST": for_the_ranks}
    assert note.startswith(f"TORCH_CUDA_ARCH_LIST={given} is {for_the_ranks} for the ranks: DeepSpeed 0.19.8 reads")


@pytest.mark.parametrize("given", [None, "", "9.0", "8.0;9.0+PTX", "9.0;8.0", "8.0 9.0", "Hopper"])
def test_an_arch_list_deepspeed_reads_or_none_is_left_alone(given: str | None):
    assert deepspeed_arch_env({} if given is None else {"TORCH_CUDA_ARCH_LIST": given}) == ({}, None)


def test_every_rank_gets_the_plain_arch_and_one_note_is_said():
    """An H100 node's preset 9.0a: the ranks launch starts (spawn) or becomes (exec, under srun) get 9.0; the note
    is the plan's once, on rank 0's launch only."""
    environ = {"TORCH_CUDA_ARCH_LIST": "9.0a"}
    spawn = plan(parse(["--nproc-per-node", "2", "train"], environ, "python"), None, environ, 8, str, lambda: 41000)
    assert [c.env["TORCH_CUDA_ARCH_LIST"] for c in spawn.commands] == ["9.0", "9.0"]
    assert len(spawn.notes) == 1 and "9.0a is 9.0 for the ranks" in spawn.notes[0]
    for rank, notes in (("0", 1), ("1", 0)):
        srun = {**SRUN, "SLURM_PROCID": rank, "SLURM_LOCALID": rank, **environ}
        exec_plan = plan(parse(["train"], srun, "python"), SlurmEnvironment(srun), srun, 8, str, lambda: 41000)
        assert exec_plan.mode == "exec" and exec_plan.commands[0].env["TORCH_CUDA_ARCH_LIST"] == "9.0"
        assert len(exec_plan.notes) == notes
