"""The runtimes table: the words that run a command in an image, as the job scripts get them."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from zerokit.image.runtimes import RUNTIMES, inside, runtime_named, words_for

REPO = Path(__file__).resolve().parents[2]


def test_apptainer_words_bind_and_enter_the_directory_with_gpus():
    words = RUNTIMES["apptainer"].argv("/s/train.sif", gpu=True, binds=["/job"], workdir="/job")
    assert words == ["apptainer", "exec", "--nv", "--bind", "/job:/job", "--pwd", "/job", "/s/train.sif"]


def test_docker_words_share_network_and_ipc():
    words = RUNTIMES["docker"].argv("zerokit:cpu", gpu=True, binds=["/job"], workdir="/job")
    assert words == ["docker", "run", "--rm", "--network", "host", "--ipc", "host", "--gpus", "all",
                     "-v", "/job:/job", "-w", "/job", "zerokit:cpu"]  # fmt: skip


def test_podman_words_are_dockers_with_cdi_gpus():
    words = RUNTIMES["podman"].argv("zerokit:cpu", gpu=True, binds=["/job"], workdir="/job")
    assert words == ["podman", "run", "--rm", "--network", "host", "--ipc", "host", "--device", "nvidia.com/gpu=all",
                     "-v", "/job:/job", "-w", "/job", "zerokit:cpu"]  # fmt: skip


def test_charliecloud_words_end_with_the_separator():
    words = RUNTIMES["charliecloud"].argv("/var/tmp/cpu", gpu=True, binds=["/job"], workdir="/job")
    assert words == ["ch-run", "--set-env", "--bind=/job:/job", "--cd=/job", "/var/tmp/cpu", "--"]


def test_pyxis_words_are_srun_options():
    """enroot/pyxis is not packaged here: the words are checked as srun will get them."""
    words = words_for("pyxis", "/images/zerokit+cpu.sqsh", ["--gpu", "--bind", "/job", "--workdir", "/job", "--srun"])
    assert words == ["--container-mounts=/job:/job", "--container-workdir=/job",
                     "--container-image=/images/zerokit+cpu.sqsh"]  # fmt: skip


def test_pyxis_outside_srun_says_where_it_works():
    with pytest.raises(ValueError, match="pyxis runs through srun's options: use it in the Slurm job scripts"):
        words_for("pyxis", "x.sqsh", ["--bind", "/job"])


def test_an_unknown_runtime_names_the_known_ones():
    with pytest.raises(ValueError, match="use one of apptainer, singularity, docker, podman, charliecloud, pyxis"):
        runtime_named("podmn")


def test_inside_reads_the_runtimes_own_variable():
    assert inside({"SINGULARITY_CONTAINER": "/x.sif"}) == (RUNTIMES["singularity"], "/x.sif")
    assert inside({"HOME": "/root"}) is None


def container_words(container: str, image: str, *options: str) -> subprocess.CompletedProcess:
    script = f'source scripts/container.sh && container_words /job {" ".join(options)} && printf "%s\\n" "${{run[@]}}"'
    env = {"PATH": "/usr/bin:/bin", "CONTAINER": container, "IMAGE": image, "ZEROKIT_DIR": str(REPO)}
    return subprocess.run(["bash", "-c", script], cwd=REPO, env=env, capture_output=True, text=True)


def test_the_job_scripts_helper_reads_the_same_table():
    result = container_words("singularity", "/s/train.sif")
    assert result.stdout.split() == RUNTIMES["singularity"].argv("/s/train.sif", True, ["/job"], "/job")


def test_the_slurm_scripts_get_pyxis_options_for_srun():
    result = container_words("pyxis", "/images/cpu.sqsh", "--srun")
    assert result.stdout.split() == words_for(
        "pyxis", "/images/cpu.sqsh", ["--bind", "/job", "--workdir", "/job", "--srun"]
    )
    # train-restart.sbatch's launch runs the image in the batch script itself and calls srun from there: its words
    # are not srun's (it refuses pyxis in one line), but its health check's srun runs them as the others' does.
    slurm = {p.name: p.read_text() for p in (REPO / "scripts/slurm").glob("*.sbatch")}
    restart = slurm.pop("train-restart.sbatch")
    assert slurm and all('container_words "$SLURM_SUBMIT_DIR" --srun' in text for text in slurm.values())
    assert 'container_words "$SLURM_SUBMIT_DIR"  ' in restart and '"${run[@]}" launch --launcher srun' in restart
    assert all('srun --kill-on-bad-exit=1 "${run[@]}" launch' in text for text in [*slurm.values(), restart])


def test_the_restart_job_script_refuses_pyxis_in_one_line():
    """Its launch runs in the batch script and calls srun itself: nothing there takes srun's options."""
    env = {"PATH": "/usr/bin:/bin", "CONTAINER": "pyxis", "SLURM_SUBMIT_DIR": "/job", "SLURM_JOB_ID": "1"}
    script = REPO / "scripts/slurm/train-restart.sbatch"
    result = subprocess.run(["bash", str(script)], cwd=REPO, env=env, capture_output=True, text=True)
    assert result.returncode == 2 and result.stderr.strip().splitlines() == [
        "error: pyxis runs through srun's options, and launch runs here, in the batch script: use CONTAINER=none, "
        "or scripts/slurm/train-per-node.sbatch (no restarts)"
    ]


def test_the_other_scripts_refuse_pyxis_in_one_line():
    result = container_words("pyxis", "/images/cpu.sqsh")
    assert result.returncode == 2 and result.stderr.strip().splitlines() == [
        "error: pyxis runs through srun's options: use it in the Slurm job scripts, or apptainer here"
    ]


def test_the_job_scripts_helper_stops_on_an_unknown_runtime():
    result = container_words("podmn", "x")
    assert result.returncode == 2 and "unknown container runtime 'podmn'" in result.stderr


def test_no_job_script_has_its_own_copy_of_the_runtimes():
    scripts = [p for p in (REPO / "scripts").rglob("*") if p.is_file() and p.name != "container.sh"]
    assert scripts and all("case $CONTAINER" not in p.read_text() for p in scripts)
    assert all("container_words" in p.read_text() for p in scripts)


PLUGIN_OPTIONS = ["--bind", "/opt/ofi/lib:/opt/zerokit/nccl-plugin", "--env", "ZEROKIT_NCCL_PLUGIN=/p/libnccl-net.so"]


def test_a_bind_to_another_path_and_a_variable_in_each_runtimes_words():
    """The host's NCCL plugin (zerokit.image.plugin_binds): SRC:DST binds and one variable set inside."""
    plugin, bound = "/opt/ofi/lib:/opt/zerokit/nccl-plugin", "ZEROKIT_NCCL_PLUGIN=/p/libnccl-net.so"
    expected = {
        "apptainer": ["--bind", plugin, "--env", bound],
        "singularity": ["--bind", plugin, "--env", bound],
        "docker": ["-v", plugin, "-e", bound],
        "podman": ["-v", plugin, "-e", bound],
        "charliecloud": [f"--bind={plugin}", f"--set-env={bound}"],
        "pyxis": [f"--container-mounts={plugin}", f"--export=ALL,{bound}"],
    }
    for name, words in expected.items():
        plain = words_for(name, "img", ["--srun"] if name == "pyxis" else [])
        with_plugin = words_for(name, "img", [*PLUGIN_OPTIONS, *(["--srun"] if name == "pyxis" else [])])
        cut = len(plain) - len(RUNTIMES[name].image)  # the words naming the image come last
        assert with_plugin == [*plain[:cut], *words, *plain[cut:]], name


def test_the_job_scripts_helper_passes_the_plugins_options_on(tmp_path: Path):
    """ZEROKIT_NCCL_PLUGIN naming no plugin stops the helper in one line (binding a real one: test_plugin_binds)."""
    script = 'source scripts/container.sh && container_words /job && printf "%s\\n" "${run[@]}"'
    env = {"PATH": "/usr/bin:/bin", "CONTAINER": "apptainer", "IMAGE": "x.sif", "ZEROKIT_DIR": str(REPO),
           "ZEROKIT_NCCL_PLUGIN": str(tmp_path)}  # fmt: skip
    result = subprocess.run(["bash", "-c", script], cwd=REPO, env=env, capture_output=True, text=True)
    assert result.returncode == 2 and result.stdout == ""
    assert result.stderr.strip() == (
        f"error: ZEROKIT_NCCL_PLUGIN={tmp_path}: a folder must hold one NCCL net plugin (libnccl-net*.so), it "
        "holds none: name the plugin's .so"
    )
