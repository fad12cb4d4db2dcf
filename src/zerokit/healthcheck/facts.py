"""What each rank reports about its node: identity (versions, image, lock) to compare, and resources to show.

Identity facts must be the same on every node (IDENTITY names them); a node that differs from the
majority is named. Read without importing DeepSpeed (package metadata), GPU facts from torch and,
where present, nvidia-smi (NVML's command line: driver, clocks, ECC), the node's side of its transport
(transport.py: doctor's reading of /sys/class/infiniband and the plugin); none of it may fail the check.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
from collections.abc import Mapping
from dataclasses import asdict
from pathlib import Path

import zerokit
from zerokit.cluster import node_memory
from zerokit.foundations.files import sha256_file
from zerokit.foundations.packages import installed_version
from zerokit.foundations.paths import STACKS_DIR
from zerokit.healthcheck.transport import node_transport, socket_interface
from zerokit.image.image_info import read_image_info
from zerokit.image.runtimes import inside
from zerokit.image.stack import environment_stack

# Facts every node must share; the others (memory, /dev/shm, clocks) are shown, not compared.
IDENTITY = (
    "zerokit", "commit", "stack", "lock_sha256", "image", "python", "torch", "deepspeed", "nccl", "cuda",
    "gpu_model", "gpu_count", "driver",
)  # fmt: skip
NVIDIA_SMI_FIELDS = ("name", "driver_version", "clocks.sm", "clocks.max.sm", "ecc.errors.uncorrected.volatile.total")


def node_facts(environ: Mapping[str, str], torch) -> dict:
    stack = environment_stack(environ)
    lock = STACKS_DIR.parent / "lock" / f"{stack}.txt"
    built = read_image_info() or {}  # inside a zerokit image: its tag and build id (stack-commit)
    facts = {
        "host": socket.gethostname(),
        "interface": socket_interface(environ),
        "transport": asdict(node_transport(environ)),  # what NCCL takes from this node (doctor's reading)
        "zerokit": zerokit.__version__,
        "commit": built.get("commit") or git_commit(Path(zerokit.__file__).resolve().parents[2]),
        "stack": stack,
        "lock_sha256": file_sha256(lock),
        "image": image_identity(built),
        "image_path": runtime_image(environ),
        "python": sys.version.split()[0],
        "torch": torch.__version__,
        "deepspeed": _version("deepspeed"),
        "mem_available": mem_available(),
        "shm_bytes": shm_bytes(),
        "cpus": os.cpu_count() or 0,
        **gpu_facts(torch),
    }
    return facts


def image_identity(built: dict) -> str:
    """The image's tag and build id (/etc/zerokit/image.json): the same on every node of a job, wherever each
    node keeps its copy (the runtime's path for it is a fact shown, not compared)."""
    return f"{built.get('tag', '?')} ({built.get('build_id', '?')})" if built else "none (host)"


def runtime_image(environ: Mapping[str, str]) -> str:
    found = inside(environ)
    return f"{found[0].name} {found[1]}" if found else "-"


def git_commit(folder: Path) -> str:
    """The checkout's commit, read from .git (no git needed); "-" outside a checkout (an image)."""
    git = folder / ".git"
    try:
        head = (git / "HEAD").read_text().strip()
        if not head.startswith("ref: "):
            return head[:12]
        ref = head[5:]
        if (git / ref).is_file():
            return (git / ref).read_text().strip()[:12]
        for line in (git / "packed-refs").read_text().splitlines():
            if line.endswith(" " + ref):
                return line.split()[0][:12]
    except OSError:
        pass
    return "-"


def file_sha256(path: Path) -> str:
    try:
        return sha256_file(path)[:16]
    except OSError:
        return "missing"


def mem_available(meminfo: Path = Path("/proc/meminfo")) -> int:
    """Bytes of MemAvailable (0 when unreadable)."""
    try:
        return node_memory.meminfo(meminfo.read_text()).get("MemAvailable", 0)
    except (OSError, ValueError):
        return 0


def shm_bytes(path: str = "/dev/shm") -> int:
    try:
        stat = os.statvfs(path)
    except OSError:
        return 0
    return stat.f_blocks * stat.f_frsize


def gpu_facts(torch) -> dict:
    """GPU model/count from torch, NCCL's version; driver, clocks and ECC from nvidia-smi where present."""
    if not torch.cuda.is_available():
        return {"gpu_count": 0, "gpu_model": "-", "nccl": "-", "cuda": torch.version.cuda or "-", "driver": "-"}
    count = torch.cuda.device_count()
    nccl = torch.cuda.nccl.version()
    facts = {
        "gpu_count": count,
        "gpu_model": torch.cuda.get_device_name(0),
        "nccl": ".".join(str(part) for part in nccl) if isinstance(nccl, tuple) else str(nccl),
        "cuda": torch.version.cuda or "-",
        "driver": "-",
    }
    rows = nvidia_smi_rows()
    if rows:
        facts["driver"] = rows[0]["driver_version"]
        facts["sm_clocks_mhz"] = [_number(r["clocks.sm"]) for r in rows]
        facts["sm_max_clocks_mhz"] = [_number(r["clocks.max.sm"]) for r in rows]
        facts["ecc_uncorrected"] = [_number(r["ecc.errors.uncorrected.volatile.total"]) for r in rows]
    return facts


def nvidia_smi_rows() -> list[dict[str, str]]:
    if shutil.which("nvidia-smi") is None:
        return []
    argv = ["nvidia-smi", f"--query-gpu={','.join(NVIDIA_SMI_FIELDS)}", "--format=csv,noheader,nounits"]
    try:
        out = subprocess.run(argv, capture_output=True, text=True, timeout=10).stdout
    except (OSError, subprocess.TimeoutExpired):
        return []
    return parse_nvidia_smi(out)


def parse_nvidia_smi(text: str) -> list[dict[str, str]]:
    rows = []
    for line in text.splitlines():
        values = [v.strip() for v in line.split(",")]
        if len(values) == len(NVIDIA_SMI_FIELDS):
            rows.append(dict(zip(NVIDIA_SMI_FIELDS, values, strict=True)))
    return rows


def _number(text: str) -> int | None:
    try:
        return int(float(text))
    except ValueError:  # "[N/A]" (ECC off, a clock not reported)
        return None


def _version(package: str) -> str:
    return installed_version(package) or "not installed"
