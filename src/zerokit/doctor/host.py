"""The host: CPU instruction set, /dev/shm, and the memlock and open-files limits."""

from __future__ import annotations

import contextlib
import os
import platform
import resource
from collections.abc import Callable
from pathlib import Path

from zerokit.cluster.shm_segments import PREFIX, orphaned_segments
from zerokit.doctor.context import Context
from zerokit.doctor.result import CheckResult, fail, ok, warn

GIB = 1024**3
MIB = 1024**2
SHM_MINIMUM = 1 * GIB
NOFILE_MINIMUM = 4096

# /proc/cpuinfo flags each x86-64 level adds (gcc's -march=x86-64-vN; lzcnt shows as "abm").
LEVEL_FLAGS: dict[str, tuple[str, ...]] = {
    "x86-64": ("lm", "cmov", "cx8", "fpu", "fxsr", "mmx", "sse", "sse2"),
    "x86-64-v2": ("cx16", "lahf_lm", "popcnt", "sse4_1", "sse4_2", "ssse3"),
    "x86-64-v3": ("avx", "avx2", "bmi1", "bmi2", "f16c", "fma", "abm", "movbe", "xsave"),
    "x86-64-v4": ("avx512f", "avx512bw", "avx512cd", "avx512dq", "avx512vl"),
}


def required_flags(target: str) -> tuple[str, ...]:
    """Every flag a level needs: its own and those of the levels below it."""
    levels = list(LEVEL_FLAGS)
    return tuple(flag for level in levels[: levels.index(target) + 1] for flag in LEVEL_FLAGS[level])


def cpu_flags(cpuinfo: Path) -> set[str]:
    for line in cpuinfo.read_text().splitlines():
        if line.startswith("flags"):
            return set(line.partition(":")[2].split())
    return set()


def check_cpu_target(ctx: Context, *, cpuinfo: Path = Path("/proc/cpuinfo")) -> list[CheckResult]:
    """DeepSpeed's host ops (cpu_adam & co.) are compiled for the stack's cpu_target; a CPU below it gets SIGILL."""
    name = "cpu: instruction set"
    target = ctx.stack.cpu_target
    fix = (
        f"run on nodes that support {target}, or lower cpu_target in containers/stacks/{ctx.stack.name}.toml "
        "and rebuild the image"
    )
    machine = platform.machine()
    if machine not in ("x86_64", "AMD64"):
        return [fail(name, f"this is {machine}; the stack's ops are built for {target}", fix)]
    flags = cpu_flags(cpuinfo)
    missing = [flag for flag in required_flags(target) if flag not in flags]
    if missing:
        return [
            fail(
                name,
                f"the CPU lacks {', '.join(missing)}: host ops built for {target} would die with 'Illegal instruction'",
                fix,
            )
        ]
    best = [level for level in LEVEL_FLAGS if all(f in flags for f in required_flags(level))][-1]
    return [ok(name, f"CPU supports {best}; the stack's host ops need {target}")]


def check_shm(ctx: Context, *, path: Path = Path("/dev/shm")) -> list[CheckResult]:
    """Shared memory for DataLoader workers and DeepSpeed's shm_comm; Docker gives only 64 MiB by default."""
    name = "/dev/shm"
    fix = (
        "give the container a bigger /dev/shm: `docker run --shm-size=8g ...` or `--ipc=host`; Apptainer uses "
        "the host's /dev/shm, so there raise the host's tmpfs (`mount -o remount,size=8g /dev/shm`)"
    )
    try:
        stats = os.statvfs(path)
    except OSError as error:
        return [fail(name, f"{path}: {error.strerror}", fix)]
    size, free = stats.f_blocks * stats.f_frsize, stats.f_bavail * stats.f_frsize
    detail = f"{path}: {size / GIB:.1f} GiB, {free / GIB:.1f} GiB free"
    if size < SHM_MINIMUM:
        row = fail(name, f"{path}: {size / MIB:.0f} MiB, less than {SHM_MINIMUM // GIB} GiB", fix)
    elif free < SHM_MINIMUM:
        row = warn(
            name,
            f"{detail}: less than {SHM_MINIMUM // GIB} GiB free",
            f"free {path} (stale files of earlier runs?) or enlarge it",
        )
    else:
        row = ok(name, detail)
    return [row, *left_segments(path)]


def left_segments(path: Path) -> list[CheckResult]:
    """DeepSpeed's CPU all-reduce segments of this user that no process maps: memory runs left behind."""
    segments = orphaned_segments(path)
    if not segments:
        return []
    total = 0
    for segment in segments:
        with contextlib.suppress(FileNotFoundError):  # removed meanwhile
            total += segment.stat().st_size
    return [
        warn(
            f"{path}: DeepSpeed segments",
            f"{len(segments)} all-reduce segments ({total / GIB:.1f} GiB) that runs which ended left in {path}, "
            "mapped by no process (DeepSpeed never removes them; zerokit's launch and train do)",
            f"remove them: `rm {path}/{PREFIX}_{os.getuid()}_*` while no run of yours is starting on this node",
        )
    ]


Limit = tuple[int, int]


def check_limits(ctx: Context, *, getrlimit: Callable[[int], Limit] = resource.getrlimit) -> list[CheckResult]:
    return [memlock(getrlimit(resource.RLIMIT_MEMLOCK)), nofile(getrlimit(resource.RLIMIT_NOFILE))]


def limit_text(value: int) -> str:
    return "unlimited" if value == resource.RLIM_INFINITY else str(value)


def memlock(limit: Limit) -> CheckResult:
    """RDMA (NCCL over InfiniBand, GPUDirect) registers pinned memory and fails under a small memlock limit."""
    soft, _ = limit
    if soft == resource.RLIM_INFINITY:
        return ok("limit: memlock", "unlimited")
    return warn(
        "limit: memlock",
        f"{soft // 1024} KiB: NCCL over InfiniBand/RDMA may fail to register memory",
        "raise it to unlimited: `ulimit -l unlimited` (limits.conf on the nodes), `docker run --ulimit "
        "memlock=-1`; Slurm passes on the submitting shell's limits (PropagateResourceLimits)",
    )


def nofile(limit: Limit) -> CheckResult:
    """DataLoader workers pass tensors as file descriptors; a 1024 limit runs out with several workers."""
    soft, hard = limit
    if soft == resource.RLIM_INFINITY or soft >= NOFILE_MINIMUM:
        return ok("limit: nofile", f"{limit_text(soft)} (hard {limit_text(hard)})")
    raise_to = "$(ulimit -Hn)" if hard == resource.RLIM_INFINITY or hard >= NOFILE_MINIMUM else "65536"
    return warn(
        "limit: nofile",
        f"{soft} open files (hard {limit_text(hard)}): DataLoader workers can run out",
        f"`ulimit -n {raise_to}` before starting, or `docker run --ulimit nofile=65536:65536`",
    )
