"""The runtimes table: the words that run a command in an image, as the job scripts get them."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from zerokit.runtimes import RUNTIMES, inside, runtime_named

REPO = Path(__file__).resolve().parents[2]


def test_apptainer_words_bind_and_enter_the_directory_with_gpus():
    words = RUNTIMES["apptainer"].argv("/s/train.sif", gpu=True, binds=["/job"], workdir="/job")
    assert words == ["apptainer", "exec", "--nv", "--bind", "/job:/job", "--pwd", "/job", "/s/train.sif"]


def test_docker_words_share_network_and_ipc():
    words = RUNTIMES["docker"].argv("zerokit:cpu", gpu=True, binds=["/job"], workdir="/job")
    assert words == ["docker", "run", "--rm", "--network", "host", "--ipc", "host", "--gpus", "all",
                     "-v", "/job:/job", "-w", "/job", "zerokit:cpu"]  # fmt: skip


def test_an_unknown_runtime_names_the_known_ones():
    with pytest.raises(ValueError, match="use one of apptainer, singularity, docker"):
        runtime_named("podmn")


def test_inside_reads_the_runtimes_own_variable():
    assert inside({"SINGULARITY_CONTAINER": "/x.sif"}) == (RUNTIMES["singularity"], "/x.sif")
    assert inside({"HOME": "/root"}) is None


def container_words(container: str, image: str) -> subprocess.CompletedProcess:
    script = 'source scripts/container.sh && container_words /job && printf "%s\\n" "${run[@]}"'
    env = {"PATH": "/usr/bin:/bin", "CONTAINER": container, "IMAGE": image, "ZEROKIT_DIR": str(REPO)}
    return subprocess.run(["bash", "-c", script], cwd=REPO, env=env, capture_output=True, text=True)


def test_the_job_scripts_helper_reads_the_same_table():
    result = container_words("singularity", "/s/train.sif")
    assert result.stdout.split() == RUNTIMES["singularity"].argv("/s/train.sif", True, ["/job"], "/job")


def test_the_job_scripts_helper_stops_on_an_unknown_runtime():
    result = container_words("podmn", "x")
    assert result.returncode == 2 and "unknown container runtime 'podmn'" in result.stderr


def test_no_job_script_has_its_own_copy_of_the_runtimes():
    scripts = [p for p in (REPO / "scripts").rglob("*") if p.is_file() and p.name != "container.sh"]
    assert scripts and all("case $CONTAINER" not in p.read_text() for p in scripts)
    assert all("container_words" in p.read_text() for p in scripts)
