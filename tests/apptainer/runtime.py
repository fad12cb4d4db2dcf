"""Fixtures: a real Apptainer, a train.sif built once per session, and an unprivileged caller to run it as.

Apptainer: the `apptainer` (or `singularity`) on PATH, else the stand-in that ./provision makes (as
root). The SIF: $ZEROKIT_TEST_SIF when given (`.ci/run` passes the one `make sif` built), else built
from $ZEROKIT_TEST_IMAGE with `make sif`. Skipped, saying why, without either or without root where
nothing is installed. The caller: uid 4242 (neither root nor the image's 1000), created here.
"""

from __future__ import annotations

import os
import pwd
import shutil
import subprocess
import tempfile
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
CALLER_UID = 4242
CALLER_NAME = "zk-caller"


@dataclass(frozen=True)
class Apptainer:
    binary: str  # absolute path of apptainer or singularity

    @property
    def directory(self) -> str:
        return str(Path(self.binary).parent)

    def run(self, *args: str, env: Mapping[str, str] | None = None, cwd: Path | None = None, timeout: float = 900):
        return subprocess.run(
            [self.binary, *args],
            env={**os.environ, **(env or {})},
            cwd=cwd,
            capture_output=True,
            text=True,
            timeout=timeout,
        )


@dataclass(frozen=True)
class Caller:
    """A user who is neither root nor the image's uid 1000, with a home and a working directory of their own."""

    name: str
    uid: int
    gid: int
    home: Path
    apptainer: Apptainer

    def env(self, **extra: str) -> dict[str, str]:
        """A login-like environment: HOME, USER, a PATH that finds apptainer, nothing of the test process."""
        return {
            "HOME": str(self.home),
            "USER": self.name,
            "LOGNAME": self.name,
            "PATH": f"{self.apptainer.directory}:/usr/local/bin:/usr/bin:/bin",
            "LANG": "C.UTF-8",
            **extra,
        }

    def workdir(self) -> Path:
        """A fresh directory owned by the caller (pytest's tmp_path is root's, mode 0700)."""
        path = Path(tempfile.mkdtemp(prefix="zk-caller-", dir="/tmp"))
        os.chown(path, self.uid, self.gid)
        return path

    def run(self, argv: Sequence[str], cwd: Path, env: Mapping[str, str] | None = None, timeout: float = 900):
        setpriv = ["setpriv", f"--reuid={self.uid}", f"--regid={self.gid}", "--init-groups", "--"]
        return subprocess.run(
            [*setpriv, *argv],
            env=dict(env) if env is not None else self.env(),
            cwd=cwd,
            capture_output=True,
            text=True,
            timeout=timeout,
        )


def find_apptainer() -> str | None:
    return shutil.which("apptainer") or shutil.which("singularity")


@pytest.fixture(scope="session")
def apptainer() -> Apptainer:
    found = find_apptainer()
    if found:
        return Apptainer(found)
    if os.geteuid() != 0:
        pytest.skip("no apptainer or singularity on PATH, and provisioning one (tests/apptainer/provision) needs root")
    result = subprocess.run([str(REPO / "tests/apptainer/provision")], capture_output=True, text=True, timeout=900)
    if result.returncode != 0:
        pytest.fail(f"tests/apptainer/provision failed:\n{result.stderr[-3000:]}")
    return Apptainer(str(Path(result.stdout.strip().splitlines()[-1]) / "apptainer"))


@pytest.fixture(scope="session")
def sif(apptainer: Apptainer) -> Iterator[Path]:
    """train.sif: $ZEROKIT_TEST_SIF, else built once from $ZEROKIT_TEST_IMAGE with `make sif`."""
    given = os.environ.get("ZEROKIT_TEST_SIF")
    if given:
        yield Path(given).resolve()
        return
    image = os.environ.get("ZEROKIT_TEST_IMAGE")
    if not image:
        pytest.skip("set ZEROKIT_TEST_SIF to a SIF built by make sif, or ZEROKIT_TEST_IMAGE to an image to build one")
    folder = Path(tempfile.mkdtemp(prefix="zk-sif-", dir="/var/tmp"))
    folder.chmod(0o755)  # readable by the unprivileged caller
    path = folder / "train.sif"
    make = ["make", "--no-print-directory", "sif", f"TAG={image}", f"SIF={path}", f"APPTAINER={apptainer.binary}"]
    result = subprocess.run(make, cwd=REPO, capture_output=True, text=True, timeout=1800)
    if result.returncode != 0:
        pytest.fail(f"make sif failed:\n{(result.stdout + result.stderr)[-4000:]}")
    try:
        yield path
    finally:
        shutil.rmtree(folder, ignore_errors=True)


@pytest.fixture(scope="session")
def caller(apptainer: Apptainer) -> Iterator[Caller]:
    """uid 4242, created for the session (as root) when this machine has no such user."""
    if os.geteuid() != 0:
        pytest.skip("running as another user needs root (setpriv)")
    created = False
    try:
        entry = pwd.getpwuid(CALLER_UID)
    except KeyError:
        subprocess.run(["useradd", "--uid", str(CALLER_UID), "--create-home", CALLER_NAME], check=True)
        entry, created = pwd.getpwuid(CALLER_UID), True
    try:
        yield Caller(entry.pw_name, entry.pw_uid, entry.pw_gid, Path(entry.pw_dir), apptainer)
    finally:
        if created:
            subprocess.run(["userdel", "--remove", CALLER_NAME], capture_output=True)
