"""What a run ran on, gathered from the process and its environment: zerokit-run.json's facts.

`train` writes them (zerokit.train.callbacks.run_record) and `doctor --against RECORD` gathers them again to compare
(zerokit.doctor.against); both read them here, so the two never disagree on what a fact is.
Heavy modules (torch, DeepSpeed) are imported inside the functions that need them.
"""

from __future__ import annotations

import json
import math
import os
import socket
import subprocess
import sys
from collections.abc import Mapping
from dataclasses import asdict
from datetime import UTC, datetime
from pathlib import Path

from zerokit import __version__
from zerokit.cluster import detect_environment
from zerokit.cluster.nic import interface_to
from zerokit.foundations.errors import UserError
from zerokit.foundations.files import sha256_file
from zerokit.foundations.packages import installed_version
from zerokit.foundations.paths import HOME
from zerokit.image import built_ops, site_torch
from zerokit.image.image_info import read_image_info
from zerokit.image.runtimes import inside
from zerokit.image.stack import environment_stack, load_stack

RECORD_NAME = "zerokit-run.json"
SIF_LABELS = Path("/.singularity.d/labels.json")  # what `apptainer inspect --labels` shows, inside the SIF
FORMAT = "zerokit-run/1"
# Variables that change how a run computes or communicates; the rest of the environment is not recorded.
RECORDED_PREFIXES = (
    "NCCL_", "ZEROKIT_", "TORCH_", "PYTORCH_", "DS_", "CUDA_", "GLOO_", "OMP_", "MKL_", "KMP_", "HF_",
    "TRANSFORMERS_", "ACCELERATE_", "UCX_", "FI_", "OMPI_MCA_", "TRITON_",
)  # fmt: skip
RECORDED_NAMES = ("MASTER_ADDR", "MASTER_PORT", "WORLD_SIZE", "LD_PRELOAD", "PYTHONHASHSEED")
# Never recorded, whatever the prefix: a record is shared with results.
SECRET_WORDS = ("TOKEN", "KEY", "SECRET", "PASSWORD", "PASSWD", "CREDENTIAL", "AUTH")
# Set for each run by the launcher, by train itself (zerokit.launch.plan and .stall, zerokit.sources.offline) or by the
# libraries it imports before starting ranks (torch, accelerate and DeepSpeed set the NVML one): recorded,
# compared only when set now too (doctor runs outside the job, where none of them has set them yet).
RUN_SET_NAMES = (
    "MASTER_ADDR", "MASTER_PORT", "WORLD_SIZE", "RANK", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "GROUP_RANK",
    "OMP_NUM_THREADS", "NCCL_SOCKET_IFNAME", "GLOO_SOCKET_IFNAME", "HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE",
    "ZEROKIT_STARTUP_MARKS", "PYTORCH_NVML_BASED_CUDA_CHECK", "LOCAL_SIZE",
    # launch's stall watch and, on GPUs, PyTorch's NCCL flight recorder (zerokit.launch.watch.stall)
    "ZEROKIT_STALL_TIMEOUT", "ZEROKIT_STALL_DIR", "ZEROKIT_STALL_STACKS", "TORCH_NCCL_TRACE_BUFFER_SIZE",
    "TORCH_NCCL_DUMP_ON_TIMEOUT", "TORCH_NCCL_DEBUG_INFO_TEMP_FILE", "TORCH_FR_DUMP_TEMP_FILE",
    "TORCH_NCCL_DEBUG_INFO_PIPE_FILE",
)  # fmt: skip
# Where caches and homes are: recorded, never a difference (they do not change what is computed).
LOCATION_NAMES = (
    "TORCH_EXTENSIONS_DIR", "TRITON_CACHE_DIR", "HF_HOME", "HF_DATASETS_CACHE", "HF_HUB_CACHE", "ZEROKIT_CACHE",
    "ZEROKIT_HOME", "TORCHINDUCTOR_CACHE_DIR",
)  # fmt: skip


def now() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")


def is_secret(name: str) -> bool:
    return any(word in name.upper() for word in SECRET_WORDS)


REDACTED = "<redacted>"


def redacted_argv(argv: list[str]) -> list[str]:
    """argv with the value of every flag whose name says it is a secret (--hub_token T, --api-key=K) hidden."""
    shown, hide_next = [], False
    for word in argv:
        name, equals, _ = word.partition("=")
        if hide_next:
            shown.append(REDACTED)
        elif word.startswith("-") and is_secret(name.lstrip("-")):
            shown.append(f"{name}={REDACTED}" if equals else word)
            hide_next = not equals
            continue
        else:
            shown.append(word)
        hide_next = False
    return shown


def recorded_environment(environ: Mapping[str, str]) -> dict[str, str]:
    return {
        name: value
        for name, value in sorted(environ.items())
        if (name.startswith(RECORDED_PREFIXES) or name in RECORDED_NAMES) and not is_secret(name)
    }


def start_environment(environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """The environment this process was started with (/proc/self/environ): what its launcher gave it,
    before any library set variables of its own in os.environ. Falls back to environ (or os.environ)."""
    if environ is not None:
        return dict(environ)
    try:
        raw = Path("/proc/self/environ").read_bytes().split(b"\0")
        return dict(item.decode(errors="replace").split("=", 1) for item in raw if b"=" in item)
    except OSError:
        return dict(os.environ)


def jsonable(value: object) -> object:
    """JSON has no Infinity or NaN (DeepSpeed's steps_per_print can be inf): they become strings."""
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    if isinstance(value, dict):
        return {str(k): jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [jsonable(v) for v in value]
    return value


def stack_name(environ: Mapping[str, str]) -> str:
    image = read_image_info()
    return environ.get("ZEROKIT_STACK") or (image or {}).get("stack") or environment_stack(environ)


def image_facts(environ: Mapping[str, str]) -> dict:
    """The image (its /etc/zerokit/image.json), the container runtime and a SIF's path and digest;
    outside any image, the Python environment's prefix."""
    info = read_image_info()
    found = inside(environ)
    facts: dict = {"kind": "image" if info else "host", "python_prefix": sys.prefix}
    if info:
        facts.update(info)
    if found:
        runtime, where = found
        facts["runtime"] = runtime.name
        facts["container"] = where
        if Path(where).is_file():  # a SIF (a sandbox folder or a Docker name has no one digest)
            facts["sif_sha256"] = sha256_file(Path(where))
        source = sif_source()
        if source:
            facts["source"] = source
    return facts


def sif_source(labels: Path = SIF_LABELS) -> str | None:
    """The image a SIF was built from, as its definition named it (`docker://host:port/zerokit@sha256:...` when
    `make sif FROM=` pinned a registry's digest); None outside a SIF."""
    try:
        found = json.loads(labels.read_text())
    except (OSError, ValueError):
        return None
    bootstrap = found.get("org.label-schema.usage.singularity.deffile.bootstrap")
    origin = found.get("org.label-schema.usage.singularity.deffile.from")
    if not (bootstrap and origin):
        return None
    return f"{bootstrap}://{origin}" if bootstrap == "docker" else f"{bootstrap}:{origin}"


def lock_facts(stack: str) -> dict:
    path = load_stack(stack).lock_file
    return {"file": str(path), "sha256": sha256_file(path) if path.is_file() else None}


def zerokit_facts() -> dict:
    """zerokit's version and commit: the checkout's (dirty when it has changes), else the image's."""
    commit, dirty = None, None
    git = ["git", "-C", str(HOME)]
    try:
        head = subprocess.run([*git, "rev-parse", "HEAD"], capture_output=True, text=True, timeout=10)
        if head.returncode == 0 and head.stdout.strip():
            commit = head.stdout.strip()
            status = subprocess.run(
                [*git, "status", "--porcelain", "--untracked-files=no"], capture_output=True, text=True, timeout=30
            )
            dirty = bool(status.stdout.strip())
    except (OSError, subprocess.SubprocessError):
        pass
    if commit is None:  # an image: no .git, the commit it was built from
        commit = (read_image_info() or {}).get("commit")
    return {"version": __version__, "commit": commit, "dirty": dirty}


def version_facts() -> dict:
    """Python, torch, CUDA, NCCL, DeepSpeed and the HF packages, and DeepSpeed's prebuilt ops."""
    import torch

    nccl = None
    if torch.version.cuda and torch.distributed.is_available() and torch.distributed.is_nccl_available():
        version = torch.cuda.nccl.version()
        nccl = ".".join(map(str, version)) if isinstance(version, tuple) else str(version)
    try:
        from deepspeed.git_version_info import installed_ops

        ops = sorted(name for name, built in installed_ops.items() if built)
    except ImportError:
        ops = []
    versions = {
        "python": sys.version.split()[0],
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "nccl": nccl,
        **{name: installed_version(name) for name in ("deepspeed", "transformers", "accelerate", "datasets", "peft")},
    }
    return {"versions": versions, "prebuilt_ops": ops}


def launcher_facts(environ: Mapping[str, str]) -> dict:
    """The scheduler or launcher, job id, hosts, world size and the network interface."""
    env = detect_environment(environ)
    hostname = socket.gethostname()
    facts = {"scheduler": None, "job_id": None, "hosts": [hostname], "world_size": 1, "hostname": hostname}
    if env is not None:
        try:
            hosts = list(env.hosts) or [hostname]
        except UserError:  # a launcher whose host list cannot be read here
            hosts = [hostname]
        facts.update(scheduler=env.name, job_id=env.job_id, hosts=hosts, world_size=env.world_size)
    facts["interface"] = environ.get("NCCL_SOCKET_IFNAME") or environ.get("GLOO_SOCKET_IFNAME") or _route(environ)
    return facts


def _route(environ: Mapping[str, str]) -> str | None:
    """The interface that reaches MASTER_ADDR (what gloo and NCCL pick when not told)."""
    address = environ.get("MASTER_ADDR")
    if not address:
        return None
    try:
        return interface_to(address)
    except UserError:
        return None


def environment_facts(environ: Mapping[str, str]) -> dict:
    """Everything `doctor --against` compares, gathered now."""
    stack = stack_name(environ)
    site = site_torch.recorded()  # a site stack: the torch, CUDA, cuDNN and NCCL the environment was built on
    built = built_ops.installed()  # what the prebuilt ops were built for (the archs), as the ops gate recorded it
    return {
        "image": image_facts(environ),
        "stack": stack,
        "lock": lock_facts(stack),
        "zerokit": zerokit_facts(),
        **version_facts(),
        **({"site_torch": asdict(site)} if site else {}),
        **({"built_ops": asdict(built)} if built else {}),
        "environment": recorded_environment(environ),
    }


def auto_leaves(config: object, prefix: str = "") -> list[str]:
    """Dotted paths of the values still "auto" in a DeepSpeed config (none once HF has resolved it)."""
    return [path for path, value in leaves(config, prefix).items() if value == "auto"]


def leaves(config: object, prefix: str = "") -> dict[str, object]:
    """A nested config as {"a.b.c": value}; lists are values."""
    if not isinstance(config, dict):
        return {prefix: config}
    found: dict[str, object] = {}
    for key, value in config.items():
        found.update(leaves(value, f"{prefix}.{key}" if prefix else str(key)))
    return found
