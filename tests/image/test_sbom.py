"""The image's SBOM (/etc/zerokit/sbom.cdx.json, CycloneDX JSON made at build time from what is really
installed): its Python packages are the lock's, its Debian packages include the stack's [apt] runtime
ones at their pinned versions; the labels point at it, and `make sbom` copies it out.

Runs against $ZEROKIT_TEST_IMAGE (skipped, with that reason, when none is named). About 10 s.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from zerokit.doctor.versions import locked_versions
from zerokit.image.sbom import SBOM_PATH, debian_packages, normalize, python_packages
from zerokit.image.stack import load_stack

IMAGE = os.environ.get("ZEROKIT_TEST_IMAGE", "")
DOCKER = os.environ.get("DOCKER", "docker")
REPO = Path(__file__).resolve().parents[2]
# A venv comes with pip (`python -m venv`); it is installed, so the SBOM lists it, but no lock pins it.
VENV_OWN = {"pip"}

pytestmark = pytest.mark.skipif(not IMAGE, reason="set ZEROKIT_TEST_IMAGE to an image built by make image")


def image_file(path: str) -> str:
    result = subprocess.run([DOCKER, "run", "--rm", IMAGE, "cat", path], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    return result.stdout


@pytest.fixture(scope="module")
def sbom() -> dict:
    return json.loads(image_file(SBOM_PATH))


def test_it_is_a_cyclonedx_document(sbom):
    assert sbom["bomFormat"] == "CycloneDX" and sbom["specVersion"] == "1.6"


def test_its_python_packages_are_the_lock_exactly(sbom):
    stack = load_stack("cpu")
    locked = {normalize(name): version for name, version in locked_versions(stack.lock_file.read_text()).items()}
    listed = {name: version for name, version in python_packages(sbom).items() if name not in VENV_OWN}
    assert set(listed) == set(locked), (sorted(set(listed) - set(locked)), sorted(set(locked) - set(listed)))
    assert {n: v for n, v in listed.items() if v != locked[n]} == {}


def test_its_debian_packages_hold_the_stacks_runtime_packages_at_their_pins(sbom):
    debs = debian_packages(sbom)
    for entry in load_stack("cpu").apt_runtime:
        name, _, pinned = entry.partition("=")
        assert name in debs, f"{name} is not in the SBOM"
        if pinned:
            assert debs[name] == pinned, (name, debs[name], pinned)
    deb_purls = [c["purl"] for c in sbom["components"] if c.get("purl", "").startswith("pkg:deb/")]
    assert "pkg:deb/debian/pdsh@2.34-0.2?arch=amd64" in deb_purls


def test_labels_point_at_it_and_make_sbom_copies_it_out(sbom, tmp_path: Path):
    labels = json.loads(
        subprocess.run(
            [DOCKER, "inspect", "--format", "{{json .Config.Labels}}", IMAGE], capture_output=True, text=True
        ).stdout
    )
    assert labels["io.zerokit.sbom"] == SBOM_PATH
    out = tmp_path / "sbom.cdx.json"
    make = ["make", "--no-print-directory", "sbom", f"TAG={IMAGE}", f"SBOM_OUT={out}", f"DOCKER={DOCKER}"]
    result = subprocess.run(make, cwd=REPO, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stdout + result.stderr
    assert json.loads(out.read_text()) == sbom
    assert "Python" in result.stdout and "Debian packages" in result.stdout


def test_the_image_says_what_it_is(sbom):
    info = json.loads(image_file("/etc/zerokit/image.json"))
    assert info["stack"] == "cpu" and info["tag"] and info["commit"]
    assert info["labels"]["io.zerokit.stack"] == "cpu"
    assert info["source_date_epoch"] and info["source_date_epoch"] > 1_600_000_000
