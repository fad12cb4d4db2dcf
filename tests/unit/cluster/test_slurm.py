"""Slurm: ranks that srun started; the step's variables win over the job's."""

from __future__ import annotations

import pytest

from zerokit.cluster import SlurmEnvironment
from zerokit.cluster.slurm import tasks_per_node
from zerokit.foundations.errors import UserError

from .observe import observed

SRUN = {  # task 5 of `srun -N2 --ntasks-per-node=4` in job 123456
    "SLURM_JOB_ID": "123456",
    "SLURM_STEP_ID": "0",
    "SLURM_PROCID": "5",
    "SLURM_LOCALID": "1",
    "SLURM_NODEID": "1",
    "SLURM_NTASKS": "8",
    "SLURM_STEP_NUM_TASKS": "8",
    "SLURM_TASKS_PER_NODE": "4(x2)",
    "SLURM_STEP_TASKS_PER_NODE": "4(x2)",
    "SLURM_JOB_NODELIST": "gpu[07-08]",
    "SLURM_STEP_NODELIST": "gpu[07-08]",
}
BATCH_SCRIPT = {  # the batch script of the same job: task 0 of the batch step, which has no SLURM_STEP_ID
    "SLURM_JOB_ID": "123456",
    "SLURM_PROCID": "0",
    "SLURM_LOCALID": "0",
    "SLURM_NODEID": "0",
    "SLURM_NTASKS": "8",
    "SLURM_TASKS_PER_NODE": "4(x2)",
    "SLURM_JOB_NODELIST": "gpu[07-08]",
}


@pytest.mark.parametrize(
    ("environ", "expected"),
    [
        (SRUN, (5, 1, 8, 4, 1, ("gpu07", "gpu08"), "gpu07", 23456)),
        (  # uneven: 7 tasks on 4 nodes, the last node has one
            {
                "SLURM_JOB_ID": "77",
                "SLURM_STEP_ID": "1",
                "SLURM_PROCID": "6",
                "SLURM_LOCALID": "0",
                "SLURM_NODEID": "3",
                "SLURM_NTASKS": "7",
                "SLURM_TASKS_PER_NODE": "2(x3),1",
                "SLURM_JOB_NODELIST": "n[1-4]",
            },
            (6, 0, 7, 1, 3, ("n1", "n2", "n3", "n4"), "n1", 20077),
        ),
        (  # `srun -E -N1 -n2` on the third node of a 3-node job: the step's variables win
            {
                "SLURM_JOB_ID": "77",
                "SLURM_STEP_ID": "2",
                "SLURM_PROCID": "1",
                "SLURM_LOCALID": "1",
                "SLURM_NODEID": "0",
                "SLURM_NTASKS": "6",
                "SLURM_STEP_NUM_TASKS": "2",
                "SLURM_TASKS_PER_NODE": "2(x3)",
                "SLURM_STEP_TASKS_PER_NODE": "2",
                "SLURM_JOB_NODELIST": "n[1-3]",
                "SLURM_STEP_NODELIST": "n3",
            },
            (1, 1, 2, 2, 0, ("n3",), "n3", 20077),
        ),
        (  # only SLURM_NTASKS_PER_NODE: one count for every node
            {
                "SLURM_STEP_ID": "0",
                "SLURM_PROCID": "2",
                "SLURM_LOCALID": "2",
                "SLURM_NODEID": "0",
                "SLURM_NTASKS": "8",
                "SLURM_NTASKS_PER_NODE": "4",
                "SLURM_NODELIST": "a,b",
            },
            (2, 2, 8, 4, 0, ("a", "b"), "a", 29500),
        ),
        (
            {**SRUN, "SLURM_STEP_NODELIST": "login1,gpu[01-02,05]", "MASTER_ADDR": "10.0.0.9", "MASTER_PORT": "4000"},
            (5, 1, 8, 4, 1, ("login1", "gpu01", "gpu02", "gpu05"), "10.0.0.9", 4000),
        ),
    ],
)
def test_table(environ, expected):
    assert SlurmEnvironment.detect(environ)
    assert observed(SlurmEnvironment(environ)) == expected


@pytest.mark.parametrize(
    ("environ", "detected"),
    [
        (SRUN, True),
        (BATCH_SCRIPT, False),  # a batch script has SLURM_PROCID=0 but is no rank
        ({"SLURM_JOB_ID": "123456", "SLURM_JOB_NODELIST": "gpu[07-08]"}, False),
        ({k: v for k, v in SRUN.items() if k != "SLURM_PROCID"}, False),
    ],
)
def test_detect_only_tasks_that_srun_started(environ, detected):
    assert SlurmEnvironment.detect(environ) is detected


@pytest.mark.parametrize(
    ("value", "counts"),
    [("4", (4,)), ("4(x2)", (4, 4)), ("2(x3),1", (2, 2, 2, 1)), ("1,3(x2),2", (1, 3, 3, 2))],
)
def test_tasks_per_node(value, counts):
    assert tasks_per_node("V", value) == counts


@pytest.mark.parametrize(
    ("change", "field", "message"),
    [
        (
            {"SLURM_PROCID": "abc"},
            "rank",
            "SLURM_PROCID='abc' is not a whole number: start the ranks with `srun` and leave the SLURM_* variables "
            "to it",
        ),
        ({"SLURM_PROCID": "8"}, "rank", "SLURM_PROCID=8 is out of range for 8 ranks: start the ranks with `srun`"),
        (
            {"SLURM_STEP_TASKS_PER_NODE": "4(x)"},
            "local_world_size",
            "SLURM_STEP_TASKS_PER_NODE='4(x)' is not a list of task counts like 2(x3),1: let srun set it",
        ),
        (
            {"SLURM_STEP_TASKS_PER_NODE": "4"},
            "local_world_size",
            "SLURM_NODEID=1 has no entry in SLURM_STEP_TASKS_PER_NODE='4': start the ranks with `srun`",
        ),
        ({"SLURM_STEP_NODELIST": "gpu[07-"}, "hosts", "SLURM_STEP_NODELIST='gpu[07-' is not a node list like"),
        ({"SLURM_NODEID": "one"}, "node_rank", "SLURM_NODEID='one' is not a whole number"),
    ],
)
def test_bad_values_are_named(change, field, message):
    env = SlurmEnvironment({**SRUN, **change})
    with pytest.raises(UserError) as err:
        getattr(env, field)
    assert str(err.value).startswith(message)


def test_without_a_node_list_the_message_says_how_to_pass_the_address():
    env = SlurmEnvironment({k: v for k, v in SRUN.items() if "NODELIST" not in k})
    with pytest.raises(UserError) as err:
        _ = env.main_address
    assert str(err.value) == (
        "cannot tell the main address under Slurm without a host list "
        "(no SLURM_STEP_NODELIST, SLURM_JOB_NODELIST, SLURM_NODELIST): "
        "pass it with `srun --export=ALL,MASTER_ADDR=<first host>`"
    )
