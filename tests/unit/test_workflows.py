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


def test_the_gpu_workflow_runs_the_stacks_python_and_the_proof_and_uploads_its_reports():
    import tomllib

    workflow = yaml.safe_load((REPO / ".github" / "workflows" / "gpu-smoke.yml").read_text())
    smoke, proof = workflow["jobs"]["smoke"], workflow["jobs"]["proof"]
    python = next(step["with"]["python-version"] for step in smoke["steps"] if "setup-python" in step.get("uses", ""))
    stack = tomllib.loads((REPO / "containers" / "stacks" / "cuda13.toml").read_text())
    assert python == stack["python"]  # the smoke job's dev environment is made by the stack's Python
    assert any("make gpu-proof" in step.get("run", "") for step in proof["steps"])
    uploaded = next(step["with"]["path"] for step in proof["steps"] if "upload-artifact" in step.get("uses", ""))
    for report in ("report.md", "report.json", "tests.xml", "logs/", "bench/results.json"):
        assert f"build/gpu-proof/{report}" in uploaded, report
