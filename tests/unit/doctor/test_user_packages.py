"""doctor names packages from a user's PYTHONPATH folder, and fails on one that hides another version."""

from __future__ import annotations

import subprocess
import sys
from importlib import metadata
from pathlib import Path

from zerokit.doctor.context import Context
from zerokit.doctor.shadows import check_user_packages
from zerokit.image.stack import load_stack


def dist_info(folder: Path, name: str, version: str) -> None:
    """What `pip install --target folder` leaves for a package: its dist-info with METADATA."""
    info = folder / f"{name.replace('-', '_')}-{version}.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")


def check(folder: Path) -> tuple[str, str, str]:
    (result,) = check_user_packages(Context(stack=load_stack("cpu"), environ={"PYTHONPATH": str(folder)}))
    return result.status, result.detail, result.fix


def test_a_package_the_environment_lacks_is_listed(tmp_path: Path):
    dist_info(tmp_path, "tabulate-not-in-the-image", "0.9.0")
    status, detail, _ = check(tmp_path)
    assert status == "ok" and "tabulate-not-in-the-image 0.9.0" in detail


def test_another_version_of_an_environment_package_fails_naming_both(tmp_path: Path):
    dist_info(tmp_path, "transformers", "4.0.0")
    status, detail, fix = check(tmp_path)
    assert status == "fail"
    assert f"transformers 4.0.0 in {tmp_path} hides the environment's {metadata.version('transformers')}" in detail
    assert "make image EXTRA=" in fix


def test_a_same_version_copy_is_a_warning(tmp_path: Path):
    dist_info(tmp_path, "rich", metadata.version("rich"))
    status, detail, _ = check(tmp_path)
    assert status == "warn" and "rich" in detail


def test_pip_target_with_a_real_package_is_seen(tmp_path: Path):
    """A real `pip install --target` (a wheel built here, no index needed) is found by its metadata."""
    project = tmp_path / "proj"
    (project / "zk_shadow_probe").mkdir(parents=True)
    (project / "zk_shadow_probe" / "__init__.py").write_text("")
    (project / "pyproject.toml").write_text(
        '[project]\nname = "zk-shadow-probe"\nversion = "1.2.3"\n[build-system]\nrequires = ["setuptools"]\n'
        'build-backend = "setuptools.build_meta"\n'
    )
    target = tmp_path / "extra"
    pip = [sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--no-build-isolation", "--target"]
    subprocess.run([*pip, str(target), str(project)], check=True, capture_output=True)
    status, detail, _ = check(target)
    assert status == "ok" and "zk-shadow-probe 1.2.3" in detail
