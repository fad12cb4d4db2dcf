"""Images through a registry (issue 31): the cpu image under its tag matrix, the SIF built from the registry and
recording the digest, the SIF as an OCI artifact, signed, verified, and its signer named by doctor inside it.

`.ci/run` starts a real OCI registry on loopback (tests/image/start-registry: Debian's docker-registry), pushes
the cpu image with `make push`, and builds train.sif from the registry by digest (`make sif
FROM=docker://...@sha256:...`) with Docker's socket out of reach; it names the registry in
$ZEROKIT_TEST_REGISTRY (host:port/zerokit) and the SIF in $ZEROKIT_TEST_SIF. Skipped, saying so, without them.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import urllib.request
from pathlib import Path

import pytest

from tests.apptainer.runtime import Apptainer, apptainer  # noqa: F401 (a fixture)
from zerokit.foundations.files import sha256_file

REPO = Path(__file__).resolve().parents[2]
REGISTRY = os.environ.get("ZEROKIT_TEST_REGISTRY", "")
IMAGE = os.environ.get("ZEROKIT_TEST_IMAGE", "zerokit:cpu")
SIF = Path(os.environ.get("ZEROKIT_TEST_SIF", "train.sif"))
MANIFESTS = ", ".join(
    [
        "application/vnd.docker.distribution.manifest.v2+json",
        "application/vnd.oci.image.manifest.v1+json",
        "application/vnd.oci.image.index.v1+json",
    ]
)

pytestmark = pytest.mark.skipif(
    not REGISTRY or not SIF.is_file(), reason="set by .ci/run: ZEROKIT_TEST_REGISTRY and a SIF built from it"
)


def make(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        ["make", "--no-print-directory", *args], cwd=REPO, env={**os.environ, **(env or {})},
        capture_output=True, text=True, timeout=900,
    )  # fmt: skip


def registry_api(path: str) -> tuple[dict[str, str], bytes]:
    """GET http://host:port/v2/<path> on the registry: its headers and body."""
    host = REGISTRY.split("/", 1)[0]
    request = urllib.request.Request(f"http://{host}/v2/{path}", headers={"Accept": MANIFESTS})
    with urllib.request.urlopen(request, timeout=30) as response:
        return dict(response.headers), response.read()


def test_the_tag_matrix_names_one_image_and_the_sif_records_its_digest(apptainer: Apptainer):  # noqa: F811
    repository = REGISTRY.split("/", 1)[1]
    labels = json.loads(subprocess.run(
        ["docker", "image", "inspect", "-f", "{{ json .Config.Labels }}", IMAGE], capture_output=True, text=True
    ).stdout)  # fmt: skip
    version, commit = labels["org.opencontainers.image.version"], labels["org.opencontainers.image.revision"]
    matrix = [re.sub(r"[^A-Za-z0-9_.-]", "_", tag) for tag in ("cpu", f"cpu-{version}", f"cpu-{commit[:12]}")]
    tags = json.loads(registry_api(f"{repository}/tags/list")[1])["tags"]
    assert set(matrix) <= set(tags)
    digests = {registry_api(f"{repository}/manifests/{tag}")[0]["Docker-Content-Digest"] for tag in matrix}
    assert len(digests) == 1
    # What a run record says of the image it ran in (zerokit.image.provenance): the registry's digest.
    facts = apptainer.run(
        "exec", str(SIF), "python", "-c",
        "import json, os; from zerokit.image.provenance import image_facts; print(json.dumps(image_facts(os.environ)))",
    )  # fmt: skip
    assert facts.returncode == 0, facts.stderr
    assert json.loads(facts.stdout)["source"] == f"docker://{REGISTRY}@{digests.pop()}"


def test_the_sif_travels_as_an_oci_artifact_byte_for_byte(tmp_path: Path, apptainer: Apptainer):  # noqa: F811
    common = [f"APPTAINER={apptainer.binary}", f"REGISTRY={REGISTRY}", "NO_HTTPS=1"]
    pushed = make("push-sif", *common, f"SIF={SIF}")
    assert pushed.returncode == 0, pushed.stderr
    pulled = make("pull-sif", *common, f"SIF={tmp_path / 'pulled.sif'}")
    assert pulled.returncode == 0, pulled.stderr
    assert sha256_file(tmp_path / "pulled.sif") == sha256_file(SIF)


def test_a_signed_sif_verifies_and_an_altered_one_fails_in_one_line(tmp_path: Path, apptainer: Apptainer):  # noqa: F811
    keyring = {"APPTAINER_KEYSDIR": str(tmp_path / "keys")}
    tool = f"APPTAINER={apptainer.binary}"
    made = make("signing-key", tool, "NAME=zerokit CI", "EMAIL=ci@zerokit.invalid", env=keyring)
    assert made.returncode == 0, made.stderr
    signed = tmp_path / "signed.sif"
    shutil.copyfile(SIF, signed)
    assert make("sign-sif", tool, f"SIF={signed}", env=keyring).returncode == 0
    verified = make("verify-sif", tool, f"SIF={signed}", env=keyring)
    assert verified.returncode == 0, verified.stderr
    assert "signed by zerokit CI (zerokit SIF signing) <ci@zerokit.invalid>" in verified.stdout
    assert "labels match its image record and packages" in verified.stdout
    # doctor, inside the SIF, reads the signer's key from the file and its name from the caller's keyring
    # (~/.apptainer/keys, or APPTAINER_KEYSDIR given with --env: Apptainer keeps its own variables outside).
    doctor = apptainer.run(
        "exec", "--env", f"APPTAINER_KEYSDIR={keyring['APPTAINER_KEYSDIR']}", str(signed), "doctor", "--json"
    )
    (row,) = [row for row in json.loads(doctor.stdout) if row["name"] == "container: signature"]
    assert row["detail"].startswith(
        "signed.sif is signed by zerokit CI (zerokit SIF signing) <ci@zerokit.invalid> (key "
    )

    # One byte of the file system changed after signing.
    layout = apptainer.run("sif", "list", str(signed)).stdout
    start, end = map(int, re.search(r"\|(\d+)-(\d+)\s*\|FS", layout).groups())
    with signed.open("r+b") as sif:
        sif.seek((start + end) // 2)
        byte = sif.read(1)
        sif.seek(-1, os.SEEK_CUR)
        sif.write(bytes([byte[0] ^ 0xFF]))
    altered = make("verify-sif", tool, f"SIF={signed}", env=keyring)
    assert altered.returncode != 0
    (line,) = [line for line in altered.stderr.splitlines() if line.startswith("error:")]
    assert "the signature does not hold" in line and "integrity" in line
