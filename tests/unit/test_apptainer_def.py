"""apptainer.def, parsed with spython, agrees with the Dockerfile it wraps: entrypoints, environment, labels."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from spython.main.parse.parsers import DockerParser, SingularityParser

from zerokit.image.stack import load_stack

REPO = Path(__file__).resolve().parents[2]
# entrypoints/ssh is a shim for launchers' remote commands (zerokit.launch.remote_shell), not a command of its own.
ENTRYPOINTS = sorted(p.name for p in (REPO / "entrypoints").iterdir() if p.name != "ssh")
# Differs on purpose: a .sif is read-only, so the HF cache moves to $HOME there.
DIFFERENT_ON_PURPOSE = {"HF_HOME"}


@pytest.fixture(scope="module")
def definition(tmp_path_factory):
    """The definition as `make sif` builds it by default: its header's {{ BOOTSTRAP }} and {{ FROM }} filled
    from %arguments, as Apptainer fills them (spython reads only a docker bootstrap)."""
    text = (REPO / "apptainer.def").read_text()
    arguments = text.split("%arguments", 1)[1].split("\n%", 1)[0]
    defaults = dict(line.strip().split("=", 1) for line in arguments.splitlines() if "=" in line)
    header, body = text.split("%arguments", 1)
    header = re.sub(r"\{\{ *(BOOTSTRAP|FROM) *\}\}", lambda m: defaults[m[1]], header)
    rendered = tmp_path_factory.mktemp("def") / "apptainer.def"
    rendered.write_text(header + "%arguments" + body)
    return SingularityParser(str(rendered)).recipe["spython-base"]


def test_by_default_the_sif_is_made_of_the_cpu_image(definition):
    assert definition.fromHeader == "zerokit:cpu"


@pytest.fixture(scope="module")
def docker_runtime():
    return DockerParser(str(REPO / "Dockerfile")).recipe["runtime"]


def variables(lines: list[str]) -> dict[str, str]:
    """NAME=value lines (not shell code) with build variables written one way: {{ STACK }} and ${STACK} -> <STACK>."""
    pairs = dict(line.split("=", 1) for line in lines if re.match(r"\w+=", line))
    return {k: re.sub(r"\{\{ *(\w+) *\}\}|\$\{(\w+)\}", lambda m: f"<{m[1] or m[2]}>", v) for k, v in pairs.items()}


def test_runscript_dispatches_to_exactly_the_entrypoints(definition):
    (case_line,) = [line for line in definition.install if 'exec "$cmd"' in line]
    dispatched = re.search(r"echo \"([\w|]+)\)", case_line)[1].split("|")
    assert sorted(dispatched) == ENTRYPOINTS


def test_environment_agrees_with_the_dockerfile(definition, docker_runtime):
    apptainer, docker = variables(definition.environ), variables(docker_runtime.environ)
    assert set(apptainer) <= set(docker), set(apptainer) - set(docker)
    assert {k: v for k, v in apptainer.items() if k not in DIFFERENT_ON_PURPOSE} == {
        k: docker[k] for k in apptainer if k not in DIFFERENT_ON_PURPOSE
    }


def test_labels_are_the_stack_labels_and_the_entrypoints(definition):
    labels = dict(line.split(" ", 1) for line in definition.labels)
    assert labels.pop("io.zerokit.entrypoints").split() == ENTRYPOINTS
    assert set(labels) <= set(load_stack("cpu").labels("commit", "base"))


def test_apptainer_test_section_is_the_doctor_gate(definition):
    assert 'echo "doctor --strict" >> /tests.sh' in definition.install
