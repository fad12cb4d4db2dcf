"""Podman and Charliecloud as runtimes of the table (src/zerokit/image/runtimes.py), run for real on the cpu
image ($ZEROKIT_TEST_IMAGE, from Docker) with the words the job scripts and `make smoke` get.

Skipped, saying why, without the image, without the runtime (Debian 12: apt-get install podman
charliecloud), or where the runtime cannot start a container on this machine.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tarfile
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import logged_losses
from zerokit.image.runtimes import words_for

IMAGE = os.environ.get("ZEROKIT_TEST_IMAGE", "")
TRAIN = ["train", "--config", "zero3", "--max_steps", "6", "--logging_steps", "2"]

pytestmark = pytest.mark.skipif(not IMAGE, reason="set ZEROKIT_TEST_IMAGE to an image built by make image")


def needs(*binaries: str) -> None:
    missing = [b for b in binaries if shutil.which(b) is None]
    if missing:
        pytest.skip(f"{', '.join(missing)} not installed (Debian 12: apt-get install podman charliecloud)")


def run(argv: list[str], cwd: Path, timeout: float = 600) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "USER": os.environ.get("USER", "root"), "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1"}
    return subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)


@pytest.fixture
def work() -> Iterator[Path]:
    """Under /tmp, which ch-run shares with the host (a bound path must exist in the image)."""
    path = Path(tempfile.mkdtemp(prefix="zk-runtime-", dir="/tmp"))
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture(scope="module")
def charliecloud_image() -> Iterator[Path]:
    """The cpu image as a Charliecloud directory: `ch-convert -i docker IMAGE DIR`."""
    needs("ch-convert", "ch-run")
    folder = Path(tempfile.mkdtemp(prefix="zk-ch-", dir="/var/tmp"))
    result = run(["ch-convert", "-i", "docker", IMAGE, str(folder / "img")], cwd=folder, timeout=900)
    if result.returncode != 0:
        pytest.fail(f"ch-convert failed:\n{result.stderr[-3000:]}")
    yield folder / "img"
    shutil.rmtree(folder, ignore_errors=True)


def test_charliecloud_trains_with_the_tables_words(charliecloud_image: Path, work: Path):
    """ch-run --set-env takes the image's ENV, whose HF_HOME (and ch-run's $HOME, /root) are read-only in
    the image: caches go to a writable folder, as on a cluster."""
    words = words_for("charliecloud", str(charliecloud_image), ["--bind", str(work), "--workdir", str(work)])
    caches = [f"--set-env=HOME={work}", f"--set-env=HF_HOME={work / 'hf'}", "--set-env=HF_HUB_OFFLINE=1"]
    result = run([*words[:-2], *caches, *words[-2:], *TRAIN, "--output-dir", str(work / "run")], cwd=work)
    assert result.returncode == 0, result.stderr[-3000:]
    losses = logged_losses(work / "run")
    assert len(losses) == 3 and losses[-1] < losses[0]
    assert (work / "run" / "model.safetensors").stat().st_uid == os.getuid()


@pytest.fixture(scope="module")
def podman_image(tmp_path_factory: pytest.TempPathFactory) -> str:
    """IMAGE in podman's store (docker save | podman load), once podman has shown it can start a container."""
    needs("podman")
    folder = tmp_path_factory.mktemp("podman")
    probe = run(["podman", "import", str(tiny_rootfs(folder / "tiny.tar")), "zk-probe:latest"], cwd=folder)
    assert probe.returncode == 0, probe.stderr[-2000:]
    probe = run(["podman", "run", "--rm", "--network", "none", "zk-probe:latest", "/usr/bin/true"], cwd=folder)
    if "error setting rlimit" in probe.stderr:
        pytest.skip(
            "podman's runc cannot start a container here: setting its RLIMIT_NOFILE/RLIMIT_NPROC is 'operation "
            "not permitted' (this sandbox withholds CAP_SYS_RESOURCE from root; --ulimit host does not help)"
        )
    assert probe.returncode == 0, probe.stderr[-2000:]
    docker = os.environ.get("DOCKER", "docker")
    loaded = subprocess.run(f"{docker} save {IMAGE} | podman load", shell=True, capture_output=True, text=True)
    assert loaded.returncode == 0, loaded.stderr[-2000:]
    return IMAGE


def tiny_rootfs(path: Path) -> Path:
    """A root filesystem holding /usr/bin/true and the libraries it loads."""
    libraries = subprocess.run(["ldd", "/usr/bin/true"], capture_output=True, text=True, check=True).stdout
    files = ["/usr/bin/true", *(word for word in libraries.split() if word.startswith("/"))]
    with tarfile.open(path, "w") as tar:
        for name in files:
            tar.add(os.path.realpath(name), arcname=name.lstrip("/"))
    return path


def test_podman_trains_with_the_tables_words(podman_image: str, work: Path):
    words = words_for("podman", podman_image, ["--bind", str(work), "--workdir", str(work), "--as-caller"])
    result = run([*words, *TRAIN, "--output-dir", str(work / "run")], cwd=work)
    assert result.returncode == 0, result.stderr[-3000:]
    assert len(logged_losses(work / "run")) == 3
    assert (work / "run" / "model.safetensors").stat().st_uid == os.getuid()
