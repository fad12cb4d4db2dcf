"""containers/compare-trees, which `make verify-reproducible` and CI's venv check trust: it names every
path that differs in content, mode, link or presence, and sets apart what differs only in mtime."""

from __future__ import annotations

import os
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def compare(a: Path, b: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, str(REPO / "containers" / "compare-trees"), str(a), str(b)], capture_output=True, text=True
    )


def tree(root: Path, files: dict[str, str], mtime: int) -> Path:
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
        os.utime(path, (mtime, mtime))
    return root


FILES = {"bin/tool": "#!/bin/sh\n", "lib/a.py": "x = 1\n", "lib/__pycache__/a.pyc": "code"}


def test_trees_that_differ_only_in_mtime_are_identical(tmp_path: Path):
    result = compare(tree(tmp_path / "a", FILES, 1000), tree(tmp_path / "b", FILES, 2000))
    assert result.returncode == 0, result.stdout
    assert "identical; 3 differ only in mtime" in result.stdout


def test_each_path_that_differs_is_named(tmp_path: Path):
    a = tree(tmp_path / "a", FILES, 1000)
    b = tree(tmp_path / "b", {**FILES, "lib/__pycache__/a.pyc": "code built at 12:00", "extra": ""}, 1000)
    (b / "bin" / "tool").chmod(0o755)
    (b / "link").symlink_to("lib/a.py")
    result = compare(a, b)
    assert result.returncode == 1
    lines = result.stdout.splitlines()
    assert "only in B: extra" in lines and "only in B: link" in lines
    assert any(line.startswith("differs: lib/__pycache__/a.pyc: size") and "content" in line for line in lines)
    assert any(line.startswith("differs: bin/tool: mode") for line in lines)
    assert "4 of 8 paths differ" in lines[-1]


def test_image_tars_are_compared_by_their_members(tmp_path: Path):
    for name, text in (("a", "same"), ("b", "same"), ("c", "other")):
        src = tree(tmp_path / f"src-{name}", {"etc/zerokit/image.json": text}, 1000 if name != "b" else 5000)
        with tarfile.open(tmp_path / f"{name}.tar", "w") as tar:
            tar.add(src, arcname=".")
    assert compare(tmp_path / "a.tar", tmp_path / "b.tar").returncode == 0
    different = compare(tmp_path / "a.tar", tmp_path / "c.tar")
    assert different.returncode == 1 and "differs: etc/zerokit/image.json" in different.stdout


def test_a_wheels_zip_dates_count_as_a_difference(tmp_path: Path):
    for name, when in (("a", (2026, 1, 1, 0, 0, 0)), ("b", (2026, 1, 2, 0, 0, 0))):
        with zipfile.ZipFile(tmp_path / f"{name}.whl", "w") as wheel:
            wheel.writestr(zipfile.ZipInfo("deepspeed/__init__.py", date_time=when), "x = 1\n")
    result = compare(tmp_path / "a.whl", tmp_path / "b.whl")
    assert result.returncode == 1
    assert "differs: deepspeed/__init__.py: owner/date" in result.stdout
    assert "differs: (the file itself)" in result.stdout
