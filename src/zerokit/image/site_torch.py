"""The site's PyTorch: facts about a torch zerokit did not install, recorded once and checked after.

A site stack (`make venv STACK=site PYTHON=...`, containers/stacks/site.toml) puts zerokit on top of the
torch of a cluster module or an NGC container. Torch, CUDA, cuDNN and NCCL are the site's: this module reads
them from the interpreter (`probe`), records them in the environment (`zerokit-site.json` in its prefix)
before anything is installed, and compares them afterwards (`changes`): an install that replaced or
upgraded torch, or a torch swapped later, is named in one line. A site may also provide other packages of the
lock at its own versions (`SITE_PROVIDES=pyarrow,numpy`: a machine that reaches no index and cannot be
carried every wheel); they are recorded beside torch, left out of the install and checked the same way.
It also turns the architectures torch was built for into a `TORCH_CUDA_ARCH_LIST` that DeepSpeed 0.19.8 can
build with (`deepspeed_arch_list`).

    python -m zerokit.image.site_torch make-venv VENV   # run by the site's Python: a venv that sees its torch
    python -m zerokit.image.site_torch check            # run by the venv's Python: torch unchanged, pins agree
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import site
import subprocess
import sys
import sysconfig
import warnings
from collections.abc import Mapping
from dataclasses import asdict, dataclass, replace
from importlib import metadata
from pathlib import Path

from zerokit.foundations.errors import UserError
from zerokit.foundations.files import write_json
from zerokit.foundations.packages import installed_version

# In the environment's prefix (the venv, the image's /opt/venv): what the site's torch was when it was built.
FACTS_NAME = "zerokit-site.json"
# The .pth file that puts the site's package folders below the venv's own.
PTH_NAME = "_zerokit_site.pth"
# What a site lock gives the entries only torch needs (containers/lock/site.txt): pip skips them.
NEVER_MARKER = "sys_platform == 'never'"
MIN_PYTHON = (3, 11)


class SiteTorchError(UserError):
    """The site's Python or torch cannot carry a site stack, or changed since it was recorded."""


@dataclass(frozen=True)
class SiteTorch:
    python: str  # "3.12"
    torch: str  # "2.11.0+cu130"
    location: str  # the folder torch is installed in (site-packages or dist-packages)
    digest: str  # sha256 of torch's RECORD and its shared libraries' names and sizes
    cuda: str  # torch.version.cuda, "" for a CPU build
    cudnn: str
    nccl: str
    arch_flags: tuple[str, ...]  # as torch was built: sm_80, sm_90a, compute_90, ...
    provides: tuple[tuple[str, str], ...] = ()  # (name, the site's version) of lock packages taken from the site

    @property
    def accelerator(self) -> str:
        return "cuda" if self.cuda else "cpu"

    def summary(self) -> str:
        built = f"CUDA {self.cuda}, {' '.join(self.arch_flags) or 'no arch list'}" if self.cuda else "CPU"
        return f"torch {self.torch} ({built}) in {self.location}"


def probe() -> SiteTorch:
    """The torch this interpreter imports; needs no GPU and no driver."""
    try:
        with warnings.catch_warnings():  # a site without numpy: torch warns on import, the facts are the same
            warnings.simplefilter("ignore")
            import torch
    except Exception as error:
        raise SiteTorchError(
            f"{sys.executable} cannot import torch ({type(error).__name__}: {error}): a site stack needs the Python "
            "of the site's PyTorch (make venv STACK=site PYTHON=/path/to/python, e.g. after `module load pytorch`)"
        ) from None
    dist = metadata.distribution("torch")
    cuda = torch.version.cuda or ""
    flags = torch._C._cuda_getArchFlags() if cuda and hasattr(torch._C, "_cuda_getArchFlags") else ""
    nccl = ""
    if cuda and torch.distributed.is_nccl_available():
        nccl = ".".join(str(part) for part in torch.cuda.nccl.version())
    cudnn = torch.backends.cudnn.version() if cuda else None
    return SiteTorch(
        python=f"{sys.version_info.major}.{sys.version_info.minor}",
        torch=torch.__version__,
        location=str(Path(torch.__file__).resolve().parent.parent),
        digest=torch_digest(dist),
        cuda=cuda,
        cudnn=str(cudnn or ""),
        nccl=nccl,
        arch_flags=tuple((flags or "").split()),
    )


def torch_digest(dist: metadata.Distribution) -> str:
    """A cheap fingerprint of an installed torch: its RECORD (every file's hash as installed) and the names and
    sizes of its shared libraries (a library copied over another changes size). Left out: what holds the
    folder it was installed in (.pyc files, the console scripts' #! line), so one torch has one digest
    wherever it is installed."""
    digest = record_digest(dist)
    lib = Path(str(dist.locate_file("torch/lib")))
    for path in sorted(lib.glob("*.so*")) if lib.is_dir() else []:
        digest.update(f"{path.name} {path.stat().st_size}\n".encode())
    return digest.hexdigest()[:16]


def record_digest(dist: metadata.Distribution) -> hashlib._Hash:
    """sha256 of a distribution's RECORD (every file's hash as installed), less what holds the folder it was
    installed in (.pyc files, the console scripts' #! line)."""
    record = (dist.read_text("RECORD") or "").splitlines()
    kept = [line for line in record if "__pycache__/" not in line and not line.startswith("../")]
    return hashlib.sha256("\n".join(kept).encode())


def recorded(prefix: str | os.PathLike[str] | None = None) -> SiteTorch | None:
    """The facts recorded in the environment at `prefix` (default: this interpreter's), if it is a site one."""
    path = Path(prefix or sys.prefix) / FACTS_NAME
    if not path.is_file():
        return None
    data = json.loads(path.read_text())
    provides = tuple((name, version) for name, version in data.get("provides", ()))
    return SiteTorch(**{**data, "arch_flags": tuple(data["arch_flags"]), "provides": provides})


def record(facts: SiteTorch, prefix: Path) -> Path:
    path = prefix / FACTS_NAME
    write_json(path, asdict(facts), sort_keys=False)
    return path


def changes(before: SiteTorch, now: SiteTorch) -> list[str]:
    """What differs between the recorded torch and the one imported now; empty when it is the same."""
    found = []
    if now.location != before.location:
        found.append(f"torch now comes from {now.location}, not the site's {before.location}")
    if now.torch != before.torch:
        found.append(f"torch {now.torch} is installed, the site's was {before.torch}")
    elif now.digest != before.digest:
        found.append(f"torch {now.torch}'s files changed (digest {now.digest}, recorded {before.digest})")
    return found + provided_changes(before)


def provided_changes(before: SiteTorch) -> list[str]:
    """The packages the site provides (SITE_PROVIDES) that are now of another version, or gone."""
    found = []
    for name, version in before.provides:
        now = installed_version(name)
        if now != version:
            found.append(f"{name} is {now or 'not installed'} now, the site's was {version}")
    return found


def site_provides(names: list[str], lock: Path) -> tuple[tuple[str, str], ...]:
    """Run by the site's Python: (name, version) of each lock package the site provides, as installed there."""
    locked = {canonical(match) for match in re.findall(r"^([A-Za-z0-9][A-Za-z0-9_.-]*)==", lock.read_text(), re.M)}
    found = []
    for name in sorted({canonical(name) for name in names if name.strip()}):
        if name not in locked:
            raise SiteTorchError(f"SITE_PROVIDES names {name}, which is not in {lock}: name packages of the lock")
        version = installed_version(name)
        if version is None:
            raise SiteTorchError(
                f"SITE_PROVIDES names {name}, which {sys.executable} does not have: install it there or leave it "
                "out of SITE_PROVIDES so the lock's is installed"
            )
        found.append((name, version))
    return tuple(found)


def canonical(name: str) -> str:
    """A distribution name as pip compares them (PEP 503): Foo_Bar, foo.bar and foo-bar are one package."""
    return re.sub(r"[-_.]+", "-", name.strip()).lower()


# sm_90a, sm_100f: architecture-specific variants. DeepSpeed 0.19.8 parses TORCH_CUDA_ARCH_LIST entries as
# MAJOR.MINOR[+PTX] and fails on "9.0a"; the plain arch builds the same kernels without the extra features.
_FLAG = re.compile(r"^(sm|compute)_(\d+)(\d)([a-z]?)$")
_ENTRY = re.compile(r"^(\d+)\.(\d)([a-z]?)(\+PTX)?$")


def deepspeed_arch_list(entries: list[str] | tuple[str, ...]) -> tuple[str, list[str]]:
    """torch's arch flags (sm_90a, compute_90) or a TORCH_CUDA_ARCH_LIST's entries (9.0a, 8.0+PTX) as a
    list DeepSpeed 0.19.8 accepts ("8.0;9.0+PTX"), and a note for each entry that was changed."""
    archs: dict[str, bool] = {}  # MAJOR.MINOR -> with PTX
    notes = []
    for entry in entries:
        flag, plain = _FLAG.match(entry), _ENTRY.match(entry)
        if flag:
            kind, major, minor, variant = flag.groups()
            arch, ptx = f"{major}.{minor}", kind == "compute"
        elif plain:
            major, minor, variant, ptx_suffix = plain.groups()
            arch, ptx = f"{major}.{minor}", bool(ptx_suffix)
        else:
            raise SiteTorchError(f"cannot read CUDA architecture {entry!r}: write it as 9.0, 9.0+PTX or sm_90")
        if variant:
            notes.append(f"{entry} built as {arch}: DeepSpeed 0.19.8 cannot build arch-specific ({variant}) variants")
        archs[arch] = archs.get(arch, False) or ptx
    ordered = sorted(archs, key=lambda arch: tuple(int(part) for part in arch.split(".")))
    return ";".join(f"{arch}+PTX" if archs[arch] else arch for arch in ordered), notes


def arch_entries(facts: SiteTorch, environ: Mapping[str, str] | None = None) -> list[str]:
    """TORCH_CUDA_ARCH_LIST when the caller sets one (e.g. only the GPU of this machine), else torch's own."""
    chosen = (os.environ if environ is None else environ).get("TORCH_CUDA_ARCH_LIST", "").replace(" ", ";")
    return [entry for entry in chosen.split(";") if entry] or list(facts.arch_flags)


def site_paths() -> list[str]:
    """This interpreter's package folders (site-packages, dist-packages, PYTHONPATH entries), not its stdlib,
    the user's ~/.local, the working folder, nor zerokit's own source (the venv installs zerokit itself)."""
    stdlib = {os.path.realpath(sysconfig.get_paths()[key]) for key in ("stdlib", "platstdlib")}
    not_the_sites = {
        os.path.realpath(site.getusersitepackages()),
        os.path.realpath(os.getcwd()),
        str(Path(__file__).resolve().parents[2]),
    }
    found = []
    for entry in sys.path:
        if not entry or not os.path.isdir(entry):
            continue
        real = os.path.realpath(entry)
        packages = real.endswith(("site-packages", "dist-packages"))
        if real in stdlib or (os.path.dirname(real) in stdlib and not packages):
            continue  # the stdlib and lib-dynload: the venv has its own
        if real not in not_the_sites and real not in found:
            found.append(real)
    return found


def make_venv(venv: Path, lock: Path, provides: list[str] = ()) -> SiteTorch:
    """Run by the site's Python: a venv over it whose own packages come first and whose torch (and any package
    named in `provides`) is the site's."""
    if sys.version_info < MIN_PYTHON:
        raise SiteTorchError(
            f"{sys.executable} is Python {sys.version.split()[0]}; zerokit needs {'.'.join(map(str, MIN_PYTHON))} "
            "or newer: load a newer Python module or container"
        )
    facts = probe()
    check_lock(lock, facts)
    facts = replace(facts, provides=site_provides(list(provides), lock))
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    purelib = subprocess.run(
        [str(venv / "bin" / "python"), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        check=True, capture_output=True, text=True,
    ).stdout.strip()  # fmt: skip
    # The site's folders after the venv's own (a .pth appends to sys.path): what the venv installs wins,
    # torch and what only torch needs come from the site. Works for a venv, conda, a module's PYTHONPATH.
    (Path(purelib) / PTH_NAME).write_text("".join(f"{path}\n" for path in site_paths()))
    record(facts, venv)
    return facts


def check_lock(lock: Path, facts: SiteTorch) -> None:
    """Refuse, before installing, a lock that would install a torch over the site's."""
    for line in lock.read_text().splitlines():
        name = re.match(r"^([A-Za-z0-9_.-]+)==(\S+)", line)
        if name and name.group(1).lower() == "torch" and NEVER_MARKER not in line:
            raise SiteTorchError(
                f"{lock} would install torch {name.group(2).rstrip(' ;')} over the site's {facts.torch}: a site lock "
                "leaves torch out (regenerate it with `make lock STACK=site`)"
            )


def torch_requirement_conflicts(site_version: str, paths: list[str] | None = None) -> list[str]:
    """Packages installed in paths (default: this environment's own site-packages, not the site's) whose torch
    requirement the site's torch does not meet (what pip would 'fix' by replacing torch): 'name version
    needs torch SPEC'."""
    from packaging.requirements import Requirement
    from packaging.version import Version

    version = Version(Version(site_version).public)  # 2.11.0+cu130 meets >=2.11 as pip judges it
    conflicts = []
    own = paths or sorted({sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"]})
    for dist in metadata.distributions(path=own):
        for text in dist.requires or []:
            requirement = Requirement(text)
            if requirement.name.lower() != "torch" or not requirement.specifier:
                continue
            if requirement.marker and not requirement.marker.evaluate({"extra": ""}):
                continue  # an extra's requirement, not installed
            if not requirement.specifier.contains(version, prereleases=True):
                conflicts.append(f"{dist.metadata['Name']} {dist.version} needs torch{requirement.specifier}")
    return sorted(set(conflicts))


def check_environment() -> SiteTorch:
    """Run by the venv's Python after installing: the site's torch untouched, every pin satisfied by it."""
    before = recorded()
    if before is None:
        raise SiteTorchError(f"{sys.prefix} has no {FACTS_NAME}: it was not made by `make venv STACK=site`")
    now = probe()
    found = changes(before, now)
    if found:
        raise SiteTorchError(f"{'; '.join(found)}: rebuild with make venv STACK=site PYTHON=<the site's python>")
    conflicts = torch_requirement_conflicts(now.torch)
    if conflicts:
        raise SiteTorchError(
            f"the site's torch {now.torch} does not meet {', '.join(conflicts)}: "
            "use a site torch these pins accept, or pin older packages in containers/stacks/common/packages.toml"
        )
    return now


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m zerokit.image.site_torch", allow_abbrev=False, description=__doc__)
    commands = parser.add_subparsers(dest="command", required=True)
    make = commands.add_parser("make-venv", help="run by the site's Python: a venv over its torch, facts recorded")
    make.add_argument("venv", type=Path)
    make.add_argument("--lock", type=Path, required=True, help="the site lock that will be installed into it")
    make.add_argument("--site-provides", default="", help="comma-separated lock packages to take from the site")
    commands.add_parser("provided", help="run by the venv's Python: the packages the site provides, one a line")
    commands.add_parser("check", help="run by the venv's Python: torch unchanged and every torch pin met")
    commands.add_parser("facts", help="print this interpreter's torch facts as JSON")
    commands.add_parser("digest", help="print the digest of this interpreter's torch (containers/cached-ds-wheel)")
    args = parser.parse_args(argv)
    try:
        if args.command == "make-venv":
            facts = make_venv(args.venv, args.lock, args.site_provides.split(","))
            print(f"site-torch: {args.venv} over {facts.summary()}")
            for name, version in facts.provides:
                print(f"site-torch: {name} {version} is the site's (SITE_PROVIDES), not the lock's")
        elif args.command == "provided":
            print("".join(f"{name}\n" for name, _ in (recorded() or probe()).provides), end="")
        elif args.command == "check":
            facts = check_environment()
            print(f"site-torch: {facts.summary()} unchanged; every installed package accepts it")
        elif args.command == "digest":
            print(torch_digest(metadata.distribution("torch")))  # without importing torch
        else:
            print(json.dumps(asdict(probe()), indent=2))
    except SiteTorchError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
