"""GPU: visible, of a compute capability torch and the prebuilt ops have code for, with a driver new enough.

What torch sees, and what the ops were recorded as built for, is gathered by one probe function; the verdicts
are pure functions of its GpuInfo, so they are tested with a made-up GpuInfo on machines without a GPU.
"""

from __future__ import annotations

import ctypes
import re
from collections.abc import Callable
from dataclasses import dataclass

from zerokit.doctor.context import Context
from zerokit.doctor.result import CheckResult, fail, ok, skip, warn
from zerokit.image import built_ops
from zerokit.image.built_ops import BuiltOps
from zerokit.image.stack import SITE, Stack

Capability = tuple[int, int]

GPU_FIX = (
    "run on a GPU node (Slurm: `--gpus=N` or `--gres=gpu:N`) and pass the GPUs into the container "
    "(`docker run --gpus all`, `apptainer exec --nv`); check CUDA_VISIBLE_DEVICES"
)


@dataclass(frozen=True)
class GpuInfo:
    torch_cuda: str | None  # CUDA runtime torch was built with (torch.version.cuda); None for a CPU build
    devices: tuple[tuple[str, Capability], ...]  # (name, compute capability) of each visible GPU
    arch_list: tuple[str, ...]  # torch.cuda.get_arch_list(): "sm_80", "sm_90", "compute_90", ...
    driver: Capability | None  # newest CUDA the driver supports; None without libcuda
    built: BuiltOps | None = None  # what the installed DeepSpeed's ops were built for; None: not recorded


def driver_cuda_version() -> Capability | None:
    """From libcuda's cuDriverGetVersion (12040 -> (12, 4)); works without a GPU context."""
    try:
        libcuda = ctypes.CDLL("libcuda.so.1")
    except OSError:
        return None
    version = ctypes.c_int()
    if libcuda.cuDriverGetVersion(ctypes.byref(version)) != 0:
        return None
    return version.value // 1000, version.value % 1000 // 10


def probe_gpu() -> GpuInfo:
    import torch

    cuda = torch.version.cuda
    if not cuda:
        return GpuInfo(None, (), (), None)
    driver = driver_cuda_version()
    arch_list = tuple(torch.cuda.get_arch_list())
    built = built_ops.installed()
    if not torch.cuda.is_available():
        return GpuInfo(cuda, (), arch_list, driver, built)
    devices = tuple(
        (torch.cuda.get_device_name(i), tuple(torch.cuda.get_device_capability(i)))
        for i in range(torch.cuda.device_count())
    )
    return GpuInfo(cuda, devices, arch_list, driver, built)


def check_gpu(ctx: Context, *, probe: Callable[[], GpuInfo] = probe_gpu) -> list[CheckResult]:
    try:
        info = probe()
    except Exception as error:  # torch failing to import is the finding
        return [fail("gpu", f"could not ask torch: {type(error).__name__}: {error}", GPU_FIX)]
    results = [visibility(info, ctx)]
    if info.devices:
        capabilities = sorted({capability for _, capability in info.devices})
        results += [torch_arch(info.arch_list, capabilities), ops_arch(ctx.stack, capabilities, info.built)]
    if info.torch_cuda and (info.devices or ctx.require_gpu or ctx.stack.accelerator == "cuda"):
        results.append(driver(info.driver, info.torch_cuda, severity=results[0].status))
    return results


def visibility(info: GpuInfo, ctx: Context) -> CheckResult:
    if info.devices:
        names = ", ".join(f"{name} ({cc_text(cc)})" for name, cc in info.devices)
        return ok("gpu", f"{len(info.devices)} visible: {names}")
    if not info.torch_cuda:
        why = "torch is a CPU build"
    else:
        visible = ctx.environ.get("CUDA_VISIBLE_DEVICES")
        why = "no GPU visible to torch" + (f" (CUDA_VISIBLE_DEVICES={visible!r})" if visible is not None else "")
    if ctx.require_gpu:
        fix = GPU_FIX if info.torch_cuda else f"use a CUDA stack and image; {ctx.stack.name!r} is CPU-only"
        return fail("gpu", f"{why}, and --require-gpu was given", fix)
    if ctx.stack.accelerator != "cuda":
        return skip("gpu", f"{why}; stack {ctx.stack.name!r} does not use one")
    return warn("gpu", f"{why}; training would run on the CPU", GPU_FIX)


def cc_text(capability: Capability) -> str:
    return f"{capability[0]}.{capability[1]}"


def arch_number(capability: Capability) -> int:
    return capability[0] * 10 + capability[1]  # (9, 0) -> 90, as in sm_90; (12, 0) -> 120


def covers(built: Capability, device: Capability) -> bool:
    """Binary code for X.y runs on X.z for z >= y (CUDA's binary compatibility within a major version)."""
    return built[0] == device[0] and built[1] <= device[1]


def torch_arch(arch_list: tuple[str, ...], capabilities: list[Capability]) -> CheckResult:
    """torch's kernels: binary code (sm_XY) for each GPU, or at least PTX (compute_XY, XY <= the GPU's) to JIT."""
    name = "gpu: torch arch"
    fix = "use a torch build (stack) whose arch list includes this GPU"
    native = {int(m[1]) for m in (re.fullmatch(r"sm_(\d+)[a-z]?", a) for a in arch_list) if m}
    ptx = {int(m[1]) for m in (re.fullmatch(r"compute_(\d+)[a-z]?", a) for a in arch_list) if m}
    verdicts = []
    for capability in capabilities:
        number = arch_number(capability)
        if any(covers(divmod(n, 10), capability) for n in native):
            continue
        usable = [p for p in ptx if p <= number]  # PTX runs on its own and every later architecture
        if usable:
            verdicts.append(
                warn(
                    name,
                    f"no sm_{number} code in torch ({' '.join(arch_list)}): kernels are "
                    f"JIT-compiled from PTX compute_{max(usable)} at start",
                    fix,
                )
            )
        else:
            verdicts.append(
                fail(name, f"torch has no code for sm_{number}; it was built for {' '.join(arch_list)}", fix)
            )
    return worst(verdicts) or ok(name, f"{' '.join(arch_list)} covers {', '.join(map(cc_text, capabilities))}")


def parse_arch_list(text: str) -> tuple[set[Capability], set[Capability]]:
    """TORCH_CUDA_ARCH_LIST ("8.0;9.0+PTX", also space-separated) -> (native, with PTX)."""
    native, ptx = set(), set()
    for entry in re.split(r"[;\s]+", text.strip()):
        match = re.fullmatch(r"(\d+)\.(\d+)[a-z]?(\+PTX)?", entry)
        if match:
            capability = (int(match[1]), int(match[2]))
            native.add(capability)
            if match[3]:
                ptx.add(capability)
    return native, ptx


def ops_arch(stack: Stack, capabilities: list[Capability], built: BuiltOps | None = None) -> CheckResult:
    """DeepSpeed's prebuilt CUDA ops have code for the archs they were built with, not for torch's list: as
    recorded at build where the environment has the record, else the stack's torch_cuda_arch_list."""
    name = "gpu: ops arch"
    arch_list = built_ops.arch_list(stack, built)
    native, ptx = parse_arch_list(arch_list)
    missing = [c for c in capabilities if not any(covers(built_for, c) for built_for in native)]
    fix = rebuild_fix(built.stack if built else stack.name, arch_list, missing)
    verdicts = []
    for capability in missing:
        below = [p for p in ptx if p <= capability]
        if below:
            verdicts.append(
                warn(
                    name,
                    f"ops have no native code for {cc_text(capability)}: JIT from PTX "
                    f"{cc_text(max(below))} at first use",
                    fix,
                )
            )
        else:
            why = " (recorded at build)" if built else ""
            verdicts.append(
                fail(name, f"DeepSpeed's ops are built for {arch_list!r}{why}; this GPU is {cc_text(capability)}", fix)
            )
    source = "arch list recorded at build" if built else "stack arch list"
    return worst(verdicts) or ok(name, f"{source} {arch_list or 'none'} covers {', '.join(map(cc_text, capabilities))}")


def rebuild_fix(stack_name: str, arch_list: str, missing: list[Capability]) -> str:
    """Rebuild the ops for the GPU: a site stack's from TORCH_CUDA_ARCH_LIST, a pinned one's from its stack file."""
    entries = [entry for entry in re.split(r"[;\s]+", arch_list.strip()) if entry] + [cc_text(c) for c in missing]
    wanted = ";".join(sorted(entries, key=lambda entry: tuple(int(n) for n in re.findall(r"\d+", entry)[:2])))
    if stack_name == SITE:
        return f'rebuild the ops for this GPU: make venv STACK=site TORCH_CUDA_ARCH_LIST="{wanted}"'
    return (
        f"rebuild the ops for this GPU: add {', '.join(map(cc_text, missing))} to torch_cuda_arch_list in "
        f'containers/stacks/{stack_name}.toml ("{wanted}") and rebuild the image (make image STACK={stack_name}) '
        f"or the venv (make venv STACK={stack_name})"
    )


def driver(version: Capability | None, runtime: str, severity: str) -> CheckResult:
    """The driver must support the CUDA runtime torch ships; same major is enough (minor version compatibility)."""
    name = "gpu: driver"
    wanted = tuple(int(part) for part in runtime.split(".")[:2])
    fix = f"update the NVIDIA driver to one for CUDA {runtime} or newer, or use a stack built for an older CUDA"
    if version is None:
        verdict = fail if severity == "fail" else warn  # as bad as "no GPU" is here
        return verdict(name, "no NVIDIA driver (libcuda.so.1 not found)", GPU_FIX)
    text = f"driver supports CUDA {cc_text(version)}, torch's runtime is {runtime}"
    if version >= wanted:
        return ok(name, text)
    if version[0] == wanted[0]:
        return warn(name, f"{text}: runs through minor version compatibility; PTX JIT needs a newer driver", fix)
    return fail(name, f"{text}: too old", fix)


def worst(results: list[CheckResult]) -> CheckResult | None:
    order = {"fail": 0, "warn": 1, "skip": 2, "ok": 3}
    return min(results, key=lambda r: order[r.status]) if results else None
