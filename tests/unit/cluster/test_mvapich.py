"""MVAPICH's mpirun_rsh: MV2_COMM_WORLD_*."""

from __future__ import annotations

import pytest

from zerokit.cluster import MvapichEnvironment
from zerokit.foundations.errors import UserError

from .observe import observed

MPIRUN_RSH = {
    "MV2_COMM_WORLD_RANK": "6",
    "MV2_COMM_WORLD_SIZE": "8",
    "MV2_COMM_WORLD_LOCAL_RANK": "2",
    "MV2_COMM_WORLD_LOCAL_SIZE": "4",
}


@pytest.mark.parametrize(
    ("environ", "expected"),
    [
        ({**MPIRUN_RSH, "MASTER_ADDR": "m0"}, (6, 2, 8, 4, 1, (), "m0", 29500)),
        (
            {**MPIRUN_RSH, "SLURM_JOB_ID": "31", "SLURM_JOB_NODELIST": "m[0-1]"},
            (6, 2, 8, 4, 1, ("m0", "m1"), "m0", 20031),
        ),
    ],
)
def test_table(environ, expected):
    assert MvapichEnvironment.detect(environ)
    assert observed(MvapichEnvironment(environ)) == expected


def test_detect_needs_every_variable():
    assert not MvapichEnvironment.detect({k: v for k, v in MPIRUN_RSH.items() if k != "MV2_COMM_WORLD_LOCAL_RANK"})


def test_without_hosts_the_message_says_how_to_pass_the_address():
    with pytest.raises(UserError) as err:
        _ = MvapichEnvironment(MPIRUN_RSH).main_address
    assert str(err.value) == (
        "cannot tell the main address under MVAPICH without a host list (none from mpirun_rsh, and no Slurm job): "
        "pass it with `mpirun_rsh ... MASTER_ADDR=<first host> <program>`"
    )


def test_rank_beyond_the_world_is_named():
    with pytest.raises(UserError, match=r"^MV2_COMM_WORLD_RANK=9 is out of range for 8 ranks"):
        _ = MvapichEnvironment({**MPIRUN_RSH, "MV2_COMM_WORLD_RANK": "9"}).rank
