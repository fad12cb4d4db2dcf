"""`make smoke SMOKE_DEVICE=cpu` against the built image: the GPU smoke script's own steps on CPU ranks,
so the script cannot rot where CI has no GPU. Skipped, with that reason, unless $ZEROKIT_TEST_IMAGE is set.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from tests.conftest import REPO

IMAGE = os.environ.get("ZEROKIT_TEST_IMAGE", "")
DOCKER = os.environ.get("DOCKER", "docker")

pytestmark = pytest.mark.skipif(not IMAGE, reason="set ZEROKIT_TEST_IMAGE to an image built by make image")


def test_make_smoke_on_cpu_passes_and_reports(tmp_path: Path):
    out = tmp_path / "smoke"
    result = subprocess.run(
        [
            "make",
            "--no-print-directory",
            "smoke",
            "SMOKE_DEVICE=cpu",
            f"IMAGE={IMAGE}",
            f"DOCKER={DOCKER}",
            f"SMOKE_OUT={out}",
        ],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert "# zerokit smoke: PASSED" in result.stdout

    report = json.loads((out / "smoke-report.json").read_text())
    assert report["passed"] is True
    statuses = {a["name"]: a["status"] for a in report["assertions"]}
    assert statuses.pop("GPU in the arch lists") == statuses.pop("peak GPU memory reported") == "skip"
    assert set(statuses.values()) == {"pass"}, statuses
    facts = report["facts"]
    assert facts["device"] == "cpu" and facts["stack"] == "cpu" and facts["steps"] == 30
    for name, run in facts["runs"].items():
        assert run["ranks"] == 2 and len(run["losses"]) == 6, name
        assert run["losses"][-1] < 0.9 * run["losses"][0], (name, run["losses"])
    assert facts["torch_extensions"] == []  # nothing was JIT-compiled
    assert facts["generate"]["text"].startswith("three plus four is")
    # The report and the models belong to the caller, not the image's user.
    assert (out / "smoke-report.json").stat().st_uid == os.getuid()
    assert (out / "zero3" / "model.safetensors").is_file()
