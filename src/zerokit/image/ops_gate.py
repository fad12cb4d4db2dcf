"""The hard gate on DeepSpeed's prebuilt ops.

`ds_report` always exits 0, and a DeepSpeed build skips an op it finds incompatible without
failing. This gate fails, naming the op and why, unless every op the stack requests is in
`deepspeed.git_version_info.installed_ops` and loads. It never triggers a JIT compile: an op
that is not installed is reported, not built. A gate that passes records what the ops were built for in
the environment's prefix (zerokit.image.built_ops).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from zerokit.image import built_ops
from zerokit.image.stack import Stack


@dataclass(frozen=True)
class OpStatus:
    name: str
    ok: bool
    detail: str


def check_op(name: str) -> OpStatus:
    from deepspeed.git_version_info import installed_ops
    from deepspeed.ops.op_builder.all_ops import ALL_OPS

    builder = ALL_OPS.get(name)
    if builder is None:
        return OpStatus(name, False, f"DeepSpeed has no op {name!r} for this accelerator")
    if not installed_ops.get(name, False):
        why = "" if builder.is_compatible(verbose=False) else f": incompatible here ({_errors(builder)})"
        return OpStatus(name, False, f"not prebuilt{why}; a run would JIT-compile it")
    try:
        builder.load(verbose=False)
    except Exception as error:  # the op's own import error is the message the user needs
        if DRIVER_LIBRARY in str(error) and not driver_present():
            # A GPU image built on a GPU-less machine: everything but the driver was resolved.
            return OpStatus(name, True, f"prebuilt; needs the NVIDIA driver ({DRIVER_LIBRARY}) to load, absent here")
        return OpStatus(name, False, f"{LOAD_FAILURE}: {type(error).__name__}: {error}")
    return OpStatus(name, True, "prebuilt and loads")


DRIVER_LIBRARY = "libcuda.so.1"
LOAD_FAILURE = "prebuilt but fails to load"  # how a status's detail starts when the op's library does not load


def driver_present() -> bool:
    import ctypes

    try:
        ctypes.CDLL(DRIVER_LIBRARY)
    except OSError:
        return False
    return True


def _errors(builder) -> str:
    return "; ".join(getattr(builder, "error_log", None) or []) or "see ds_report"


def check_ops(names: list[str] | tuple[str, ...]) -> list[OpStatus]:
    return [check_op(name) for name in names]


def record_build(stack: Stack, prefix: Path) -> str:
    """Record what the ops just gated were built for in prefix, and say so in a line. A record of this very
    install is kept: a gate run again later (a site stack's without the build's TORCH_CUDA_ARCH_LIST) must not
    rewrite it; a prefix that cannot be written (an image's venv gated again by its user) is left alone."""
    built = built_ops.of_stack(stack)
    before = built_ops.recorded(prefix)
    if before is not None and before.digest == built.digest:
        return f"this DeepSpeed's build is recorded in {prefix / built_ops.FACTS_NAME}: kept"
    if not os.access(prefix, os.W_OK):
        return f"not recorded: {prefix} cannot be written here"
    path = built_ops.record(built, prefix)
    return f"recorded in {path}: ops built for {built.torch_cuda_arch_list or built.accelerator}"
