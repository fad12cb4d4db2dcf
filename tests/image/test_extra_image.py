"""`make image EXTRA=requirements.txt`: a derived image with a user's packages, every base pin kept.

The derived build runs containers/build-extra-image on the image named by $ZEROKIT_TEST_IMAGE (as
`make image EXTRA=` does after building it); skipped, with that reason, when none is named. The
conflict case needs no image: it fails while locking, before any build.
"""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

import pytest

from tests.conftest import REPO

IMAGE = os.environ.get("ZEROKIT_TEST_IMAGE", "")
DOCKER = os.environ.get("DOCKER", "docker")
# A pure-Python package with a dependency the base image already has (absl-py, numpy via rouge-score)
# and one it lacks (nltk): the lock must reuse the former at their pins and add the latter.
EXTRAS = "tabulate==0.9.0\nrouge-score==0.1.2\n"


def build_extra(requirements: Path, tag: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "DOCKER": DOCKER, "UV": str(REPO / ".venv/bin/uv"), "PIP_FIND_LINKS": "/opt/wheels"}
    ca = "/etc/ssl/certs/ca-certificates.crt"
    args = [str(REPO / "containers/build-extra-image"), "cpu", IMAGE or "zerokit:cpu", str(requirements), tag]
    return subprocess.run([*args, ca], env=env, capture_output=True, text=True, timeout=1200)


def test_an_extra_that_needs_another_torch_fails_in_one_line_naming_it(tmp_path: Path):
    requirements = tmp_path / "requirements.txt"
    requirements.write_text("torch==2.5.0\n")
    result = build_extra(requirements, "zerokit-test:never-built")
    assert result.returncode == 2
    (line,) = result.stderr.strip().splitlines()
    assert "torch==2.5.0" in line and "torch==2.13.0+cpu" in line and "the stack's pins do not move" in line
    assert not (tmp_path / "requirements.cpu.lock.txt").exists()


@pytest.mark.skipif(not IMAGE, reason="set ZEROKIT_TEST_IMAGE to an image built by make image")
def test_extras_build_a_derived_image_that_keeps_every_base_pin(tmp_path: Path):
    requirements = tmp_path / "requirements.txt"
    requirements.write_text(EXTRAS)
    tag = f"{IMAGE}-test-extra"
    result = build_extra(requirements, tag)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    lock = tmp_path / "requirements.cpu.lock.txt"
    locked = dict(re.findall(r"^([A-Za-z0-9_.-]+)==(\S+)", lock.read_text(), flags=re.M))
    base = dict(re.findall(r"^([A-Za-z0-9_.-]+)==(\S+)", (REPO / "containers/lock/cpu.txt").read_text(), flags=re.M))
    assert {"tabulate", "rouge-score", "nltk"} <= locked.keys()
    assert all(locked[name] == base[name] for name in locked.keys() & base.keys())  # no base pin moved
    assert "--hash=sha256:" in lock.read_text()
    try:
        script = (
            "import tabulate, rouge_score, torch, deepspeed; from importlib.metadata import version as v; "
            "print(v('tabulate'), v('torch'), v('deepspeed'), v('numpy'))"
        )
        ran = subprocess.run(
            [DOCKER, "run", "--rm", "--network", "none", tag, "python", "-c", script],
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert ran.stdout.split() == ["0.9.0", "2.13.0+cpu", "0.19.8", base["numpy"]], ran.stderr[-2000:]
        doctor = subprocess.run(
            [DOCKER, "run", "--rm", "--network", "none", "--shm-size", "1g", tag, "doctor", "--strict"],
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert doctor.returncode == 0, doctor.stdout[-3000:]
        assert "version: extra lock" in doctor.stdout
    finally:
        subprocess.run([DOCKER, "rmi", "-f", tag], capture_output=True)
