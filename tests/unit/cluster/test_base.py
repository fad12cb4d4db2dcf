"""The shared parts: ports from job ids, MASTER_ADDR / MASTER_PORT, host files, immutability."""

from __future__ import annotations

import dataclasses

import pytest

from zerokit.cluster import SlurmEnvironment, TorchrunEnvironment, port_from_job_id
from zerokit.cluster.base import block_node_rank, hostfile_hosts, nodelist_hosts, whole_number
from zerokit.foundations.errors import UserError

TORCHRUN = {"RANK": "1", "LOCAL_RANK": "1", "WORLD_SIZE": "2", "LOCAL_WORLD_SIZE": "2", "MASTER_ADDR": "n0"}
SRUN = {
    "SLURM_STEP_ID": "0",
    "SLURM_PROCID": "1",
    "SLURM_LOCALID": "1",
    "SLURM_NODEID": "0",
    "SLURM_NTASKS": "2",
    "SLURM_TASKS_PER_NODE": "2",
    "SLURM_JOB_NODELIST": "n[1-2]",
    "SLURM_JOB_ID": "123456",
}


@pytest.mark.parametrize(
    ("job_id", "port"),
    [
        (None, 29500),
        ("", 29500),
        ("no-digits", 29500),
        ("123456", 23456),
        ("1234.pbs01", 23401),  # every digit counts, also the server's
        ("4242[7]", 26427),
        ("12000", 20000),
        ("11999", 31999),
    ],
)
def test_port_from_job_id(job_id, port):
    assert port_from_job_id(job_id) == port


def test_derived_ports_stay_below_the_ephemeral_range_and_differ_for_neighbouring_jobs():
    ports = [port_from_job_id(str(job)) for job in range(1_000_000, 1_000_100)]
    assert all(20000 <= port < 32768 for port in ports)
    assert len(set(ports)) == len(ports)


@pytest.mark.parametrize(
    ("extra", "address", "port"),
    [
        ({}, "n1", 23456),
        ({"MASTER_ADDR": "10.0.0.9", "MASTER_PORT": "29400"}, "10.0.0.9", 29400),
        ({"MASTER_ADDR": " ", "MASTER_PORT": ""}, "n1", 23456),  # empty is unset
    ],
)
def test_explicit_master_addr_and_port_win(extra, address, port):
    env = SlurmEnvironment({**SRUN, **extra})
    assert (env.main_address, env.main_port) == (address, port)


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("abc", "MASTER_PORT='abc' is not a whole number: set it to a free TCP port"),
        ("70000", "MASTER_PORT=70000 is not a TCP port (1-65535)"),
        ("0", "MASTER_PORT=0 is not a TCP port (1-65535)"),
    ],
)
def test_a_bad_master_port_is_named(value, message):
    with pytest.raises(UserError) as err:
        _ = TorchrunEnvironment({**TORCHRUN, "MASTER_PORT": value}).main_port
    assert str(err.value).startswith(message)


@pytest.mark.parametrize("value", ["-1", "1.0", "", "x", "\u0663", "0x10"])
def test_whole_number_rejects_what_is_not_one(value):
    with pytest.raises(UserError, match=r"^SOME_VAR=.* is not a whole number: the fix$"):
        whole_number("SOME_VAR", value, "the fix")


def test_whole_number_accepts_surrounding_space():
    assert whole_number("SOME_VAR", " 7 ", "the fix") == 7


def test_hostfile_hosts_reads_every_format_once_per_host(tmp_path):
    path = tmp_path / "hosts"
    path.write_text("# a comment\nn1 slots=4\nn1 slots=4\nn2:8\n\n  n3  # trailing\nn1\n")
    assert hostfile_hosts({"HOSTS": str(path)}, "HOSTS") == ("n1", "n2", "n3")
    assert hostfile_hosts({}, "HOSTS") == ()


def test_an_unreadable_hostfile_is_named_with_the_fix(tmp_path):
    missing = tmp_path / "gone"
    with pytest.raises(UserError) as err:
        hostfile_hosts({"PBS_NODEFILE": str(missing)}, "PBS_NODEFILE")
    assert str(err.value).startswith(f"cannot read PBS_NODEFILE={missing} (No such file or directory): ")
    assert str(err.value).endswith("or pass MASTER_ADDR to every rank")


def test_nodelist_hosts_expands_ranges_in_order():
    environ = {"NODES": "login1,gpu[01-02,05],gpu01"}
    assert nodelist_hosts(environ, "NODES") == ("login1", "gpu01", "gpu02", "gpu05")


@pytest.mark.parametrize(
    ("rank", "local_rank", "local_size", "world_size", "node"),
    [(0, 0, 1, 1, 0), (5, 1, 4, 8, 1), (7, 3, 4, 8, 1), (2, 0, 1, 3, 2)],
)
def test_block_node_rank(rank, local_rank, local_size, world_size, node):
    assert block_node_rank(rank, local_rank, local_size, world_size, "X", "fix") == node


@pytest.mark.parametrize(
    ("rank", "local_rank", "local_size", "world_size"),
    [(1, 0, 4, 8), (4, 0, 3, 10)],  # round-robin; uneven
)
def test_block_node_rank_refuses_what_is_visibly_not_blocks(rank, local_rank, local_size, world_size):
    with pytest.raises(UserError, match=r"^cannot tell the node rank under X: .*: place them right$"):
        block_node_rank(rank, local_rank, local_size, world_size, "X", "place them right")


def test_an_environment_is_a_snapshot_and_cannot_be_changed():
    environ = dict(SRUN)
    env = SlurmEnvironment(environ)
    environ["SLURM_PROCID"] = "0"
    assert env.rank == 1
    with pytest.raises(TypeError):
        env.environ["SLURM_PROCID"] = "0"  # type: ignore[index]
    with pytest.raises(dataclasses.FrozenInstanceError):
        env.environ = {}  # type: ignore[misc]
    with pytest.raises(AttributeError):
        env.rank = 0  # type: ignore[misc]


def test_repr_never_shows_the_environment():
    env = TorchrunEnvironment({**TORCHRUN, "HF_TOKEN": "hf_secret"})
    assert "hf_secret" not in repr(env)
    assert repr(env) == "TorchrunEnvironment()"


def test_torch_env_is_what_env_init_reads():
    assert SlurmEnvironment(SRUN).torch_env() == {
        "RANK": "1",
        "LOCAL_RANK": "1",
        "WORLD_SIZE": "2",
        "LOCAL_WORLD_SIZE": "2",
        "LOCAL_SIZE": "2",  # DeepSpeed's CPU all-reduce reads it
        "GROUP_RANK": "0",
        "MASTER_ADDR": "n1",
        "MASTER_PORT": "23456",
    }
