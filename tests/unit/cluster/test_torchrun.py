"""torchrun, `zerokit launch` and DeepSpeed's launcher: RANK, LOCAL_RANK, WORLD_SIZE, ..."""

from __future__ import annotations

import pytest

from zerokit.cluster import TorchrunEnvironment
from zerokit.foundations.errors import UserError

from .observe import observed

TORCHRUN = {  # worker 5 of torchrun --nnodes 2 --nproc-per-node 4, on the second node
    "RANK": "5",
    "LOCAL_RANK": "1",
    "WORLD_SIZE": "8",
    "LOCAL_WORLD_SIZE": "4",
    "GROUP_RANK": "1",
    "ROLE_RANK": "5",
    "MASTER_ADDR": "node-a",
    "MASTER_PORT": "29400",
    "TORCHELASTIC_RUN_ID": "job7",
}


@pytest.mark.parametrize(
    ("environ", "expected"),
    [
        (TORCHRUN, (5, 1, 8, 4, 1, (), "node-a", 29400)),
        (  # zerokit launch --nproc-per-node 2: no GROUP_RANK, one node
            {
                "RANK": "1",
                "LOCAL_RANK": "1",
                "WORLD_SIZE": "2",
                "LOCAL_WORLD_SIZE": "2",
                "MASTER_ADDR": "127.0.0.1",
                "MASTER_PORT": "29511",
            },
            (1, 1, 2, 2, 0, (), "127.0.0.1", 29511),
        ),
        (  # DeepSpeed's launcher: LOCAL_SIZE and CROSS_RANK
            {
                "RANK": "3",
                "LOCAL_RANK": "1",
                "WORLD_SIZE": "4",
                "LOCAL_SIZE": "2",
                "CROSS_RANK": "1",
                "MASTER_ADDR": "n0",
                "MASTER_PORT": "29500",
            },
            (3, 1, 4, 2, 1, (), "n0", 29500),
        ),
        (  # no node variable on two nodes: derived from consecutive blocks
            {"RANK": "6", "LOCAL_RANK": "2", "WORLD_SIZE": "8", "LOCAL_WORLD_SIZE": "4", "MASTER_ADDR": "n0"},
            (6, 2, 8, 4, 1, (), "n0", 29500),
        ),
    ],
)
def test_table(environ, expected):
    assert TorchrunEnvironment.detect(environ)
    assert observed(TorchrunEnvironment(environ)) == expected


@pytest.mark.parametrize(
    ("run_id", "job_id", "port"),
    [("job7", "job7", 20007), ("none", None, 29500)],  # "none" is torchrun's default --rdzv-id
)
def test_run_id_is_the_job_id(run_id, job_id, port):
    env = TorchrunEnvironment({**TORCHRUN, "TORCHELASTIC_RUN_ID": run_id, "MASTER_PORT": ""})
    assert (env.job_id, env.main_port) == (job_id, port)


@pytest.mark.parametrize(
    ("environ", "detected"),
    [({"RANK": "0", "WORLD_SIZE": "1"}, True), ({"RANK": "0"}, False), ({"WORLD_SIZE": "1"}, False), ({}, False)],
)
def test_detect_needs_rank_and_world_size(environ, detected):
    assert TorchrunEnvironment.detect(environ) is detected


def test_without_master_addr_the_message_says_how_to_pass_it():
    env = TorchrunEnvironment({k: v for k, v in TORCHRUN.items() if k != "MASTER_ADDR"})
    with pytest.raises(UserError) as err:
        _ = env.main_address
    assert str(err.value) == (
        "cannot tell the main address under torchrun without a host list (torchrun exports none): "
        "pass it with MASTER_ADDR=<first host> in every rank's environment"
    )


@pytest.mark.parametrize(
    ("change", "field", "message"),
    [
        ({"RANK": "x"}, "rank", "RANK='x' is not a whole number: start the ranks with `torchrun`"),
        ({"RANK": "8"}, "rank", "RANK=8 is out of range for 8 ranks: "),
        ({"LOCAL_RANK": "4"}, "local_rank", "LOCAL_RANK=4 is out of range for 4 ranks: "),
        ({"WORLD_SIZE": "0"}, "world_size", "WORLD_SIZE=0 must be at least 1: "),
        ({"LOCAL_WORLD_SIZE": ""}, "local_world_size", "LOCAL_WORLD_SIZE or LOCAL_SIZE is not set under torchrun: "),
        ({"GROUP_RANK": "", "RANK": "1", "LOCAL_RANK": "0"}, "node_rank", "cannot tell the node rank under torchrun: "),
    ],
)
def test_bad_values_are_named(change, field, message):
    env = TorchrunEnvironment({**TORCHRUN, **change})
    with pytest.raises(UserError) as err:
        getattr(env, field)
    assert str(err.value).startswith(message)
