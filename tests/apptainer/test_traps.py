"""The traps Apptainer users fall into, each found by `doctor` inside train.sif with its fix.

Run as the unprivileged caller, with the environment a login shell with modules loaded would have.
"""

from __future__ import annotations

import json
import subprocess
import tempfile
from pathlib import Path

import pytest

from tests.apptainer.runtime import Caller


def doctor(caller: Caller, sif: Path, *flags: str, env: dict[str, str] | None = None) -> dict[str, dict]:
    """`apptainer exec [FLAGS] train.sif doctor --json` as the caller; rows by name."""
    argv = ["apptainer", "exec", *flags, str(sif), "doctor", "--json", "--skip", "hub"]
    result = caller.run(argv, cwd=caller.workdir(), env=caller.env(**(env or {})))
    assert result.stdout.startswith("["), result.stderr[-3000:]
    return {row["name"]: row for row in json.loads(result.stdout)}


def test_host_variables_of_loaded_modules_are_found(caller: Caller, sif: Path):
    modules = {
        "PYTHONPATH": "/opt/site/python3.11/site-packages",
        "CUDA_HOME": "/opt/site/cuda-12.2",
        "APPTAINERENV_LD_LIBRARY_PATH": "/opt/site/cuda-12.2/lib64",  # as users pass it for --nv
    }
    row = doctor(caller, sif, env=modules)["container: host environment"]
    assert row["status"] == "fail", row
    for name in ("PYTHONPATH", "CUDA_HOME", "LD_LIBRARY_PATH=/opt/site/cuda-12.2/lib64"):
        assert name in row["detail"]
    assert "--cleanenv" in row["fix"]
    passed_on_purpose = {k: v for k, v in modules.items() if not k.startswith("APPTAINERENV_")}  # kept by --cleanenv
    assert doctor(caller, sif, "--cleanenv", env=passed_on_purpose)["container: host environment"]["status"] == "ok"


def test_a_host_pythonhome_is_set_aside_and_reported(caller: Caller, sif: Path):
    """A loaded Python module's PYTHONHOME would stop the image's Python before anything could say why."""
    module = {"PYTHONHOME": "/opt/site/python-3.12"}
    argv = ["apptainer", "exec", str(sif), "train", "--help"]
    trained = caller.run(argv, cwd=caller.workdir(), env=caller.env(**module))
    assert trained.returncode == 0 and "usage: train" in trained.stdout, trained.stderr[-2000:]
    assert "zerokit: ignoring PYTHONHOME=/opt/site/python-3.12 from the host" in trained.stderr
    row = doctor(caller, sif, env=module)["container: host environment"]
    assert row["status"] == "fail" and "PYTHONHOME=/opt/site/python-3.12" in row["detail"], row


def test_packages_in_the_callers_local_do_not_shadow_the_image(caller: Caller, sif: Path):
    site = caller.home / ".local" / "lib" / "python3.11" / "site-packages"
    (site / "torch").mkdir(parents=True, exist_ok=True)
    (site / "torch" / "__init__.py").write_text("raise ImportError('the caller\\'s ~/.local torch')\n")
    subprocess.run(["chown", "-R", f"{caller.uid}:{caller.gid}", str(caller.home / ".local")], check=True)
    imported = caller.run(
        ["apptainer", "exec", str(sif), "python", "-c", "import torch; print(torch.__version__)"], cwd=caller.workdir()
    )
    assert imported.stdout.strip() == "2.13.0+cpu", imported.stderr[-2000:]
    assert doctor(caller, sif)["container: user site-packages"]["status"] == "ok"
    row = doctor(caller, sif, env={"PYTHONPATH": str(site)})["container: user site-packages"]
    assert row["status"] == "fail" and str(site) in row["detail"] and "unset PYTHONPATH" in row["fix"]


def test_home_not_mounted_is_found(caller: Caller, sif: Path):
    rows = doctor(caller, sif, "--no-home")
    assert rows["container: $HOME"]["status"] == "warn" and "--no-home" in rows["container: $HOME"]["fix"]
    assert rows["cache: HF_HOME"]["status"] == "fail"


@pytest.fixture
def small_shm() -> Path:
    """A 64 MiB tmpfs, as a node with a small /dev/shm has."""
    path = Path(tempfile.mkdtemp(prefix="zk-small-shm-", dir="/var/tmp"))
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64m,mode=1777", "tmpfs", str(path)], check=True)
    yield path
    subprocess.run(["umount", str(path)], check=True)
    path.rmdir()


def test_a_small_dev_shm_is_found(caller: Caller, sif: Path, small_shm: Path):
    row = doctor(caller, sif, "--bind", f"{small_shm}:/dev/shm")["/dev/shm"]
    assert row["status"] == "fail" and "64 MiB" in row["detail"] and "Apptainer" in row["fix"]
