"""What DeepSpeed's prebuilt ops were built for, recorded by the ops gate when it passes.

The archs the CUDA ops have code for are decided when the wheel is built, and for a site stack by the
TORCH_CUDA_ARCH_LIST of that moment (the GPU proof builds for the GPU's capability only): the stack read again
later, without that variable, names torch's whole list. So the gate records, in the environment's prefix
(`zerokit-ops.json` beside the venv's `zerokit-site.json`), the stack, the arch list the wheel was built with,
the ops and DeepSpeed's version, with a digest of the installed DeepSpeed's files: doctor, smoke and the run
record read it back, and trust it only for the DeepSpeed it was written for.
"""

from __future__ import annotations

import json
import os
import sys
from dataclasses import asdict, dataclass
from importlib import metadata
from pathlib import Path

from zerokit.foundations.files import write_json
from zerokit.image.site_torch import record_digest
from zerokit.image.stack import Stack

FACTS_NAME = "zerokit-ops.json"


@dataclass(frozen=True)
class BuiltOps:
    stack: str
    accelerator: str  # "cuda" or "cpu"
    torch_cuda_arch_list: str  # as the wheel was built ("9.0", "8.0;9.0+PTX"); "" for a CPU build
    ops: tuple[str, ...]
    deepspeed: str  # its version
    digest: str  # of the installed DeepSpeed's files (deepspeed_digest): a reinstall since is another one


def deepspeed_digest() -> str | None:
    """A fingerprint of the DeepSpeed installed now (its RECORD: every file's hash, the ops' libraries among
    them); None without one."""
    try:
        return record_digest(metadata.distribution("deepspeed")).hexdigest()[:16]
    except metadata.PackageNotFoundError:
        return None


def of_stack(stack: Stack) -> BuiltOps:
    """The record of the DeepSpeed installed now, built (as the gate has just checked) from this stack."""
    return BuiltOps(
        stack=stack.name,
        accelerator=stack.accelerator,
        torch_cuda_arch_list=stack.ds_build_env().get("TORCH_CUDA_ARCH_LIST", ""),
        ops=tuple(sorted(stack.ds_ops)),
        deepspeed=metadata.version("deepspeed"),
        digest=deepspeed_digest() or "",
    )


def record(built: BuiltOps, prefix: Path) -> Path:
    """Written whole, keys sorted and nothing of the moment in it: two builds of one image give one file."""
    path = prefix / FACTS_NAME
    write_json(path, asdict(built))
    return path


def recorded(prefix: str | os.PathLike[str] | None = None) -> BuiltOps | None:
    """The record in the environment at `prefix` (default: this interpreter's); None where there is none."""
    path = Path(prefix or sys.prefix) / FACTS_NAME
    if not path.is_file():
        return None
    data = json.loads(path.read_text())
    return BuiltOps(**{**data, "ops": tuple(data["ops"])})


def installed() -> BuiltOps | None:
    """This environment's record if it describes the DeepSpeed installed now, else None (none was recorded,
    or DeepSpeed was reinstalled since and what its ops were built for is not known)."""
    built = recorded()
    return built if built is not None and built.digest == deepspeed_digest() else None


def arch_list(stack: Stack, built: BuiltOps | None) -> str:
    """The archs DeepSpeed's CUDA ops have code for: as recorded at build, else the stack's torch_cuda_arch_list
    (never torch's own list: the ops are built apart from torch)."""
    return built.torch_cuda_arch_list if built is not None else stack.torch_cuda_arch_list
