"""zerokit.image.sbom: Debian packages become CycloneDX components with purls, and the readers tell the
Python packages (every component cyclonedx-py listed, a local wheel's without a purl included) from them."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from zerokit.image.sbom import add_dpkg, deb_component, debian_packages, python_packages


def test_a_debian_package_gets_a_purl_with_its_arch_and_an_escaped_epoch():
    component = deb_component("openssh-client", "1:9.2p1-2+deb12u3", "amd64")
    assert component["purl"] == "pkg:deb/debian/openssh-client@1%3A9.2p1-2%2Bdeb12u3?arch=amd64"
    assert component["version"] == "1:9.2p1-2+deb12u3"


def test_python_and_debian_packages_are_told_apart():
    bom = {
        "components": [
            {"name": "Torch", "version": "2.13.0+cpu", "purl": "pkg:pypi/torch@2.13.0%2Bcpu"},
            {"name": "deepspeed", "version": "0.19.8"},  # installed from a local wheel: no purl
            {"name": "python_hostlist", "version": "2.3.0", "purl": "pkg:pypi/python-hostlist@2.3.0"},
            deb_component("pdsh", "2.34-0.2", "amd64"),
        ]
    }
    assert python_packages(bom) == {"torch": "2.13.0+cpu", "deepspeed": "0.19.8", "python-hostlist": "2.3.0"}
    assert debian_packages(bom) == {"pdsh": "2.34-0.2"}


@pytest.mark.skipif(shutil.which("dpkg-query") is None, reason="needs dpkg (a Debian host)")
def test_add_dpkg_adds_every_installed_package_from_dpkgs_database(tmp_path: Path):
    path = tmp_path / "sbom.cdx.json"
    path.write_text(json.dumps({"bomFormat": "CycloneDX", "components": [{"name": "torch", "version": "2"}]}))
    added = add_dpkg(path)
    bom = json.loads(path.read_text())
    debs = debian_packages(bom)
    assert added == len(debs) > 0 and "dpkg" in debs
    assert python_packages(bom) == {"torch": "2"}
