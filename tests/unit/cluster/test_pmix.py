"""PMIx alone: the rank, and a clear error for everything else."""

from __future__ import annotations

import pytest

from zerokit.cluster import PmixEnvironment
from zerokit.foundations.errors import UserError

PMIX = {"PMIX_RANK": "3", "PMIX_NAMESPACE": "prterun-n1-1234@1", "PMIX_HOSTNAME": "n1"}


def test_the_rank_is_known():
    assert PmixEnvironment.detect(PMIX)
    assert PmixEnvironment(PMIX).rank == 3


def test_detect_needs_pmix_rank():
    assert not PmixEnvironment.detect({"PMIX_NAMESPACE": "x"})


@pytest.mark.parametrize(
    ("field", "what"),
    [
        ("world_size", "world size"),
        ("local_rank", "local rank"),
        ("local_world_size", "local world size"),
        ("node_rank", "node rank"),
    ],
)
def test_what_pmix_does_not_export_is_an_error_with_the_fix(field, what):
    with pytest.raises(UserError) as err:
        getattr(PmixEnvironment(PMIX), field)
    assert str(err.value) == (
        f"PMIx exports the rank (PMIX_RANK) but not the {what}: "
        "start the ranks with `srun`, `mpirun` or `jsrun`, which also export the sizes"
    )


def test_a_bad_rank_is_named():
    with pytest.raises(UserError, match=r"^PMIX_RANK='r3' is not a whole number"):
        _ = PmixEnvironment({**PMIX, "PMIX_RANK": "r3"}).rank


def test_main_address_needs_master_addr_without_a_slurm_job():
    assert PmixEnvironment({**PMIX, "MASTER_ADDR": "n1"}).main_address == "n1"
    with pytest.raises(UserError, match=r"^cannot tell the main address under PMIx without a host list"):
        _ = PmixEnvironment(PMIX).main_address
