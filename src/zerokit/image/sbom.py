"""The image's bill of materials: a CycloneDX JSON document of what is really installed.

`cyclonedx-py environment /opt/venv` (run at build time from a venv of its own, never in /opt/venv)
lists the venv's Python distributions from their metadata; `add-dpkg` then adds every Debian
package from dpkg's database as a component with its purl (pkg:deb/debian/NAME@VERSION?arch=ARCH).
The readers below are what the image test and `make sbom` use to compare it with the lock and stack.
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
from pathlib import Path
from urllib.parse import quote

from zerokit.foundations.files import write_json

SBOM_PATH = "/etc/zerokit/sbom.cdx.json"
DPKG_FORMAT = "${Package}\\t${Version}\\t${Architecture}\\t${db:Status-Abbrev}\\n"


def dpkg_packages(admindir: str | None = None) -> list[tuple[str, str, str]]:
    """(name, version, architecture) of every installed Debian package, sorted."""
    argv = ["dpkg-query", "-W", "-f", DPKG_FORMAT] + ([f"--admindir={admindir}"] if admindir else [])
    lines = subprocess.run(argv, check=True, capture_output=True, text=True).stdout.splitlines()
    rows = [line.split("\t") for line in lines]
    return sorted((name, version, arch) for name, version, arch, status in rows if status.startswith("ii"))


def deb_component(name: str, version: str, arch: str) -> dict:
    purl = f"pkg:deb/debian/{name}@{quote(version, safe='')}?arch={arch}"
    return {"type": "library", "bom-ref": purl, "name": name, "version": version, "purl": purl}


def add_dpkg(bom_path: Path) -> int:
    """Add the Debian packages to a CycloneDX JSON file in place; returns how many."""
    bom = json.loads(bom_path.read_text())
    debs = [deb_component(*row) for row in dpkg_packages()]
    bom["components"] = bom.get("components", []) + debs
    bom.setdefault("dependencies", []).extend({"ref": d["bom-ref"]} for d in debs)
    write_json(bom_path, bom)
    return len(debs)


def is_deb(component: dict) -> bool:
    return component.get("purl", "").startswith("pkg:deb/")


def python_packages(bom: dict) -> dict[str, str]:
    """Normalized name (PEP 503) -> version of the Python distributions: every component cyclonedx-py
    listed (one installed from a local wheel, as DeepSpeed's is, has no purl, so none is required)."""
    return {normalize(c["name"]): c["version"] for c in bom.get("components", []) if not is_deb(c)}


def debian_packages(bom: dict) -> dict[str, str]:
    return {c["name"]: c["version"] for c in bom.get("components", []) if is_deb(c)}


def normalize(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m zerokit.image.sbom", description=__doc__.splitlines()[0])
    parser.add_argument("action", choices=["add-dpkg", "summary"])
    parser.add_argument("file", type=Path)
    args = parser.parse_args(argv)
    if args.action == "add-dpkg":
        print(f"sbom: {add_dpkg(args.file)} Debian packages added to {args.file}")
    else:
        bom = json.loads(args.file.read_text())
        spec = f"{bom.get('bomFormat')} {bom.get('specVersion')}"
        print(f"{args.file}: {spec}, {len(python_packages(bom))} Python, {len(debian_packages(bom))} Debian packages")
    return 0


if __name__ == "__main__":
    sys.exit(main())
