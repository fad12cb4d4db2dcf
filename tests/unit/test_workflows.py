"""The GitHub workflows call what exists: the Makefile's targets, the stacks of containers/stacks.

(Their syntax was checked once against GitHub's workflow schema: `check-jsonschema --builtin-schema
vendor.github-workflows .github/workflows/*.yml`, which CI cannot install offline.)
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
WORKFLOWS = sorted((REPO / ".github" / "workflows").glob("*.yml"))
TARGETS = set(re.findall(r"^([a-z][\w-]*):", (REPO / "Makefile").read_text(), re.MULTILINE))


def run_lines(workflow: Path) -> list[str]:
    jobs = yaml.safe_load(workflow.read_text())["jobs"].values()
    return [step["run"] for job in jobs for step in job["steps"] if "run" in step]


@pytest.mark.parametrize("workflow", WORKFLOWS, ids=lambda path: path.name)
def test_every_make_target_a_workflow_runs_exists(workflow: Path):
    command = r"(?:^|&&|;|\|)\s*make ([a-z][\w-]*)"  # make at a command's start, not a package named make
    called = {target for run in run_lines(workflow) for target in re.findall(command, run, re.MULTILINE)}
    assert called - TARGETS == set()


def test_the_release_builds_stacks_that_exist():
    release = yaml.safe_load((REPO / ".github" / "workflows" / "release.yml").read_text())
    stacks = release["jobs"]["release"]["strategy"]["matrix"]["stack"]
    assert stacks and all((REPO / "containers" / "stacks" / f"{stack}.toml").is_file() for stack in stacks)
