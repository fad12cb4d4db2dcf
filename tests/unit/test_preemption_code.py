"""The requeue exit code lives in zerokit.foundations.errors; the job scripts that requeue on it must agree."""

from __future__ import annotations

import re

import pytest

from tests.conftest import REPO
from zerokit.foundations.errors import REQUEUE_EXIT_CODE

# The training jobs requeue themselves after a preemption checkpoint; generate.sbatch needs no checkpoint (--resume).
SCRIPTS = sorted((REPO / "scripts" / "slurm").glob("train*.sbatch"))


@pytest.mark.parametrize("script", SCRIPTS, ids=[s.name for s in SCRIPTS])
def test_job_scripts_requeue_on_the_package_exit_code(script):
    text = script.read_text()
    default = re.search(
        r"REQUEUE_EXIT_CODE=\$\{REQUEUE_EXIT_CODE:-(\d+)\}\s+"
        r"# zerokit\.foundations\.errors\.REQUEUE_EXIT_CODE",
        text,
    )
    assert default and int(default.group(1)) == REQUEUE_EXIT_CODE
