"""Packages a user added at run time (a PYTHONPATH folder on the shared filesystem) and what they hide.

The quick way to try a package on a cluster is `pip install --target DIR` with the image's Python and
`PYTHONPATH=DIR` (docs/extra-packages.md). A package there that the environment also has wins the
import and shadows the tested one: at another version it changes behaviour silently (a fail); at the
same version (pip --target copies dependencies) it only wastes space (a warn).
"""

from __future__ import annotations

import sysconfig
from importlib import metadata
from pathlib import Path

from zerokit.doctor.context import Context
from zerokit.doctor.result import CheckResult, fail, ok, warn
from zerokit.foundations.paths import HOME

NAME = "user packages"


def environment_versions() -> dict[str, str]:
    """name -> version of the distributions installed in this Python's own site-packages."""
    paths = sorted({sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"]})
    return {normalize(d.metadata["Name"]): d.version for d in metadata.distributions(path=paths)}


def normalize(name: str) -> str:
    return name.lower().replace("_", "-").replace(".", "-")


def user_folders(environ) -> list[Path]:
    """PYTHONPATH's folders, but zerokit's own source (a checkout's src/)."""
    own = (HOME / "src").resolve()
    folders = [Path(p) for p in environ.get("PYTHONPATH", "").split(":") if p]
    return [f for f in folders if f.is_dir() and f.resolve() != own]


def check_user_packages(ctx: Context) -> list[CheckResult]:
    folders = user_folders(ctx.environ)
    if not folders:
        return [ok(NAME, "none (no PYTHONPATH folder besides zerokit's)")]
    installed = environment_versions()
    added, same, other = [], [], []
    for folder in folders:
        for dist in metadata.distributions(path=[str(folder)]):
            name = normalize(dist.metadata["Name"])
            if name not in installed:
                added.append(f"{name} {dist.version}")
            elif installed[name] == dist.version:
                same.append(f"{name} ({folder})")
            else:
                other.append(f"{name} {dist.version} in {folder} hides the environment's {installed[name]}")
    where = ", ".join(map(str, folders))
    fix = (
        f"remove them from {where} (install there with `pip install --target DIR --no-deps PACKAGE`), "
        "or build a derived image: make image EXTRA=requirements.txt"
    )
    if other:
        return [fail(NAME, "; ".join(other), fix)]
    if same:
        return [warn(NAME, f"copies of the environment's own packages, same versions: {', '.join(same)}", fix)]
    return [ok(NAME, f"{len(added)} from {where}: {', '.join(added) or 'none'}")]
