"""Inside a container: what the host let in that it should not, and what the container left out.

Apptainer and Singularity pass the host's environment in: modules' PYTHONPATH, PYTHONHOME, CUDA_HOME
and LD_LIBRARY_PATH then point the image's Python and libraries at the host's. `--cleanenv` and
`--containall` go the other way: the scheduler's variables and $HOME are gone.
"""

from __future__ import annotations

import os
import site
import sys
from collections.abc import Sequence
from pathlib import Path

from zerokit.doctor.context import Context
from zerokit.doctor.result import CheckResult, fail, ok, skip, warn
from zerokit.image.container import hidden_job
from zerokit.image.runtimes import inside
from zerokit.image.sif_signatures import NotASif, keyring_names, signing_keys

# Variables an image must not take from the host; each value names what it would redirect.
LEAKS = ("PYTHONPATH", "PYTHONHOME", "CUDA_HOME", "LD_LIBRARY_PATH")
# Where the entrypoints (entrypoints/zerokit) keep a host's PYTHONHOME that they set aside.
HOST_PYTHONHOME = "ZEROKIT_HOST_PYTHONHOME"
# What the runtime itself puts on LD_LIBRARY_PATH (Apptainer: --nv's driver libraries).
RUNTIME_LIBRARY_DIRS = ("/.singularity.d/libs",)


def leaked(ctx: Context) -> dict[str, str]:
    found = {name: ctx.environ[name] for name in LEAKS if ctx.environ.get(name)}
    if ctx.environ.get(HOST_PYTHONHOME):  # set aside by the entrypoint, or Python would not have started
        found["PYTHONHOME"] = ctx.environ[HOST_PYTHONHOME]
    libraries = [d for d in found.get("LD_LIBRARY_PATH", "").split(":") if d and d not in RUNTIME_LIBRARY_DIRS]
    if libraries:
        found["LD_LIBRARY_PATH"] = ":".join(libraries)
    else:
        found.pop("LD_LIBRARY_PATH", None)
    return found


def check_container(
    ctx: Context, *, sys_path: Sequence[str] | None = None, user_site: str | None = None
) -> list[CheckResult]:
    container = inside(ctx.environ)
    if container is None:
        return [skip("container", "not inside Apptainer or Singularity")]
    runtime, image = container
    results = [ok("container", f"{runtime.name}, image {image}")]
    signature = signed_by(ctx, Path(image))
    if signature is not None:
        results.append(signature)
    from_host = leaked(ctx)
    if from_host:
        names = ", ".join(f"{k}={v}" for k, v in from_host.items())
        results.append(
            fail(
                "container: host environment",
                f"{names} came in from the host (a loaded module?): the image's Python and libraries would use the "
                "host's",
                f"`{runtime.name} exec --cleanenv ...` (add --env NAME=value for what you need), or unset "
                f"{' '.join(from_host)} (`module purge`) before {runtime.name}",
            )
        )
    else:
        results.append(ok("container: host environment", f"none of {', '.join(LEAKS)} came in from the host"))
    results.append(user_packages(ctx, sys.path if sys_path is None else sys_path, user_site))
    results.append(home(ctx, runtime.name))
    job = hidden_job(ctx.environ)
    if job:
        results.append(fail("container: scheduler variables", *job))
    return results


def user_packages(ctx: Context, sys_path: Sequence[str], user_site: str | None) -> CheckResult:
    """Packages under $HOME (pip install --user, a PYTHONPATH there) shadow the image's."""
    name = "container: user site-packages"
    user_site = user_site or site.getusersitepackages()
    home_dir = str(ctx.home)
    shadowing = [p for p in sys_path if p and (p.startswith(user_site) or p.startswith(home_dir + os.sep))]
    if shadowing:
        return fail(
            name,
            f"{', '.join(shadowing)} on sys.path: packages there shadow the image's",
            "unset PYTHONPATH (and PYTHONUSERBASE) before running the image; the image's Python ignores ~/.local",
        )
    return ok(name, f"nothing under {home_dir} on sys.path ({user_site} is ignored)")


def home(ctx: Context, runtime: str) -> CheckResult:
    name = "container: $HOME"
    path = ctx.home
    if path.is_dir() and os.access(path, os.W_OK):
        return ok(name, f"{path}, writable")
    return warn(
        name,
        f"{path} is {'not writable' if path.is_dir() else 'missing'} in the container (--no-home or --containall?): "
        "caches under it (HF_HOME by default) cannot be written",
        f"drop --no-home/--containall, or `{runtime} exec --bind DIR --env HOME=DIR ...` with a writable DIR",
    )


def signed_by(ctx: Context, image: Path) -> CheckResult | None:
    """Whether the SIF is signed, and by whom as the caller's Apptainer keyring names the key; None when the
    image is no SIF file this process can read (a sandbox folder, a path not bound in)."""
    try:
        keys = signing_keys(image)
    except (OSError, NotASif):
        return None
    if not keys:
        return ok("container: signature", f"{image.name} is not signed (`make sign-sif` signs a SIF)")
    keysdir = ctx.environ.get("APPTAINER_KEYSDIR") or str(Path(ctx.environ.get("HOME", "/")) / ".apptainer/keys")
    names = keyring_names(Path(keysdir) / "pgp-public")
    signers = ", ".join(f"{names[key]} (key {key})" if names.get(key) else f"key {key}" for key in keys)
    return ok(
        "container: signature",
        f"{image.name} is signed by {signers}; whether it still holds: `make verify-sif` outside the container",
    )
