"""Versions: Python, the training packages and the CUDA libraries against the stack the environment was built from.

Drift is a fail: a package upgraded over the image (a stray `pip install`) changes behaviour without any
error, and the stack/lock is the only record of what was tested together.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

from zerokit.doctor.context import Context
from zerokit.doctor.result import CheckResult, fail, ok, skip, warn
from zerokit.foundations.packages import installed_version
from zerokit.foundations.paths import EXTRA_LOCK
from zerokit.image.stack import Stack

# The packages whose drift breaks training most often; one row each. The rest of the lock is one row.
TRACKED = ("torch", "deepspeed", "transformers", "datasets", "accelerate", "peft")


def rebuild_fix(stack: Stack) -> str:
    if stack.site:
        return "rebuild from the stack instead of installing over it: make venv STACK=site PYTHON=<the site's python>"
    return (
        f"rebuild from the stack instead of installing over it: `make venv STACK={stack.name}` for a venv, "
        f"or rebuild the image (`make image STACK={stack.name}`)"
    )


def installed_torch() -> str | None:
    """torch's version as torch says it: PyPI's CUDA wheels say 2.11.0 in their metadata and 2.11.0+cu130
    when imported, and a site's torch is recorded (and pinned by the site stack) as imported."""
    try:
        import torch
    except Exception:  # a broken torch: the metadata's word, and other rows say why it does not import
        return installed_version("torch")
    return str(torch.__version__)


def matches(installed: str, pinned: str) -> bool:
    """PEP 440 `==`, as pip applies it: a pin without a local label (0.19.8) also accepts 0.19.8+abc."""
    try:
        from packaging.specifiers import SpecifierSet

        return SpecifierSet(f"=={pinned}").contains(installed, prereleases=True)
    except (ImportError, ValueError):  # no packaging, or a version it cannot parse
        return installed == pinned


def check_python(ctx: Context) -> list[CheckResult]:
    running = f"{sys.version_info.major}.{sys.version_info.minor}"
    detail = f"{sys.version.split()[0]} ({sys.executable})"
    if running != ctx.stack.python:
        return [fail("version: python", f"{detail}; the stack wants {ctx.stack.python}", rebuild_fix(ctx.stack))]
    return [ok("version: python", detail)]


def site_provided(stack: Stack) -> dict[str, str]:
    """A site stack's packages taken from the site at its own versions (SITE_PROVIDES), as recorded."""
    return dict(stack.site.provides) if stack.site else {}


def check_packages(ctx: Context) -> list[CheckResult]:
    results = []
    provided = site_provided(ctx.stack)
    for package in TRACKED:
        pinned = ctx.stack.packages.get(package)
        installed = installed_torch() if package == "torch" else installed_version(package)
        name = f"version: {package}"
        if package in provided and installed == provided[package]:
            results.append(ok(name, f"{installed}, the site's (SITE_PROVIDES; the stack pins {pinned})"))
        elif pinned is None:
            results.append(skip(name, f"{installed or 'not installed'}; not pinned by stack {ctx.stack.name!r}"))
        elif installed is None:
            results.append(fail(name, f"not installed; the stack pins {pinned}", rebuild_fix(ctx.stack)))
        elif not matches(installed, pinned):
            results.append(fail(name, f"{installed} installed; the stack pins {pinned}", rebuild_fix(ctx.stack)))
        else:
            results.append(ok(name, installed))
    return results


def locked_versions(text: str) -> dict[str, str]:
    """`name==version` of a hashed requirements file (what `make lock` writes), of the entries whose
    environment marker holds here (a universal lock has one entry per Python; the site lock's torch none)."""
    found = {}
    for name, version, marker in re.findall(
        r"^([A-Za-z0-9][A-Za-z0-9_.-]*)==([^\s;\\]+)(?:\s*;\s*([^\\\n]+?))?\s*\\?$", text, flags=re.M
    ):
        if not marker or marker_holds(marker):
            found[name] = version
    return found


def marker_holds(marker: str) -> bool:
    from packaging.markers import Marker

    return Marker(marker).evaluate()


def check_lock(ctx: Context) -> list[CheckResult]:
    """Every other package of the lock file in one row; a derived image's extra lock in another."""
    lock = ctx.stack.lock_file
    if not lock.is_file():
        return [skip("version: lock", f"no lock file at {lock}")]
    results = [lock_result("version: lock", lock, TRACKED, ctx.stack, site_provided(ctx.stack))]
    if EXTRA_LOCK.is_file():
        results.append(lock_result("version: extra lock", EXTRA_LOCK, (), ctx.stack))
    return results


def lock_result(
    name: str, lock: Path, left_out: tuple[str, ...], stack: Stack, provided: dict[str, str] | None = None
) -> CheckResult:
    """One row for a lock's packages; those the site provides must be at the version recorded for the site."""
    locked = {k: v for k, v in locked_versions(lock.read_text()).items() if k not in left_out}
    provided = provided or {}
    drift, sites = [], []
    for package, pinned in sorted(locked.items()):
        installed = installed_version(package)
        if package in provided and installed == provided[package]:
            sites.append(f"{package} {installed} (lock: {pinned})")
        elif installed is None or not matches(installed, pinned):
            drift.append(f"{package} {installed or 'missing'} (lock: {pinned})")
    if drift:
        shown = ", ".join(drift[:5]) + (f", and {len(drift) - 5} more" if len(drift) > 5 else "")
        return fail(
            name, f"{len(drift)} of {len(locked)} packages differ from {lock.name}: {shown}", rebuild_fix(stack)
        )
    matched = f"{len(locked) - len(sites)} {'more ' if left_out else ''}packages match {lock.name}"
    return ok(name, matched + (f"; the site's own (SITE_PROVIDES): {', '.join(sites)}" if sites else ""))


def check_site_torch(ctx: Context) -> list[CheckResult]:
    """A site stack: the torch imported now is the one recorded when the environment was built."""
    recorded = ctx.stack.site
    if recorded is None:
        return []
    from zerokit.image import site_torch

    try:
        now = site_torch.probe()
    except site_torch.SiteTorchError as error:
        return [fail("site torch", str(error), "rebuild: make venv STACK=site PYTHON=<the site's python>")]
    changed = site_torch.changes(recorded, now)
    if changed:
        return [fail("site torch", "; ".join(changed), "rebuild: make venv STACK=site PYTHON=<the site's python>")]
    return [ok("site torch", f"{now.summary()}, as recorded (digest {now.digest})")]


def check_cuda_libraries(ctx: Context) -> list[CheckResult]:
    """The CUDA runtime torch was built with, NCCL and cuDNN; none of them on a CPU stack."""
    try:
        import torch
    except Exception as error:  # a broken torch is the finding, not a crash
        return [
            fail("version: CUDA", f"torch failed to import: {type(error).__name__}: {error}", rebuild_fix(ctx.stack))
        ]
    return [_cuda_runtime(ctx.stack, torch.version.cuda), _nccl(torch), _cudnn(torch)]


def _cuda_runtime(stack: Stack, built_with: str | None) -> CheckResult:
    name = "version: CUDA"
    if stack.accelerator != "cuda":
        if built_with:
            return fail(
                name, f"torch is built for CUDA {built_with}; stack {stack.name!r} is CPU-only", rebuild_fix(stack)
            )
        return ok(name, "none (CPU build of torch, as the stack wants)")
    if not built_with:
        return fail(name, f"torch is a CPU build; the stack wants CUDA {stack.cuda}", rebuild_fix(stack))
    # torch names the CUDA it was built for as major.minor (13.0); a stack pins the toolkit (13.0.3).
    if built_with.split(".")[:2] != stack.cuda.split(".")[:2]:
        return fail(name, f"torch is built for CUDA {built_with}; the stack wants {stack.cuda}", rebuild_fix(stack))
    return ok(name, built_with)


def _nccl(torch) -> CheckResult:
    if not torch.version.cuda or not torch.distributed.is_available() or not torch.distributed.is_nccl_available():
        return skip("version: NCCL", "none (no CUDA build of torch; gloo is the backend)")
    version = torch.cuda.nccl.version()
    return ok("version: NCCL", ".".join(map(str, version)) if isinstance(version, tuple) else str(version))


def _cudnn(torch) -> CheckResult:
    if not torch.version.cuda:
        return skip("version: cuDNN", "none (no CUDA build of torch)")
    if not torch.backends.cudnn.is_available():
        return warn(
            "version: cuDNN",
            "torch is a CUDA build but cuDNN is not available",
            "install the nvidia-cudnn wheel the lock pins (rebuild the environment)",
        )
    version = torch.backends.cudnn.version()  # 90100 for 9.1.0; cuDNN 8 wrote 8902 for 8.9.2
    major, rest = divmod(version, 10000 if version >= 10000 else 1000)
    return ok("version: cuDNN", f"{major}.{rest // 100}.{rest % 100}")
