"""DeepSpeed's shared-memory all-reduce segments in /dev/shm: each removed by the run that made it.

On CPU ranks that all share one node (LOCAL_SIZE == WORLD_SIZE, which RankEnv sets), deepspeed.comm (its
shm_comm op, DeepSpeed 0.19.8) creates one segment per rank, `/dev/shm/deepspeed_allreduce_buffer_{uid}_
{MASTER_ADDR}_{MASTER_PORT}_{RANK}` (66 MiB), maps every peer's, and never unlinks any: each run left
LOCAL_SIZE times 66 MiB of the node's memory behind until reboot. Measured here: a day of test runs left 332
of them, 22 GiB, /dev/shm 91% full, and the next CI run's pytest was ended by the OOM killer.

A mapping outlives its file's name, so a rank removes its own segment as soon as every rank has mapped
every other's (`release_own_segment`, after a barrier that follows deepspeed.init_distributed), and
launch removes those of the ranks it supervised once they have ended (`remove_segments`: a rank killed
before its release). What neither removed (a job not started by zerokit, or a SIGKILL to launch itself)
doctor finds: segments of this user that no process maps (`orphaned_segments`).
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterable, Mapping
from pathlib import Path

SHM_DIR = Path("/dev/shm")
PREFIX = "deepspeed_allreduce_buffer"


def segment_path(environ: Mapping[str, str], shm_dir: Path = SHM_DIR) -> Path:
    """The segment DeepSpeed names for a rank from its variables, as its shm_initialize formats the name."""
    addr, port, rank = (environ.get(name, "") for name in ("MASTER_ADDR", "MASTER_PORT", "RANK"))
    return shm_dir / f"{PREFIX}_{os.getuid()}_{addr}_{port}_{rank}"


def release_own_segment(environ: Mapping[str, str] = os.environ, shm_dir: Path = SHM_DIR) -> None:
    """Remove this rank's segment name; only once every rank is past deepspeed.init_distributed (a barrier),
    which has each map all the others'. The memory stays, mapped, until the last rank ends."""
    with contextlib.suppress(FileNotFoundError):
        segment_path(environ, shm_dir=shm_dir).unlink()


def remove_segments(rank_envs: Iterable[Mapping[str, str]], shm_dir: Path = SHM_DIR) -> None:
    """After these ranks have ended: remove whatever segment each left (a rank killed before its release)."""
    for env in rank_envs:
        if "RANK" in env:
            with contextlib.suppress(FileNotFoundError):
                segment_path(env, shm_dir=shm_dir).unlink()


def mapped_files(proc: Path = Path("/proc")) -> set[str]:
    """Every file a process of this user maps, as /proc/PID/maps names it (others' maps cannot be read)."""
    mapped: set[str] = set()
    for maps in proc.glob("[0-9]*/maps"):
        with contextlib.suppress(OSError):  # not ours, or ended meanwhile
            for line in maps.read_text().splitlines():
                fields = line.split(maxsplit=5)  # address perms offset device inode [path]
                if len(fields) == 6:
                    mapped.add(fields[5])
    return mapped


def orphaned_segments(shm_dir: Path = SHM_DIR, proc: Path = Path("/proc")) -> list[Path]:
    """This user's DeepSpeed segments that no process maps: left by runs that ended."""
    ours = sorted(shm_dir.glob(f"{PREFIX}_{os.getuid()}_*"))
    if not ours:
        return []
    mapped = mapped_files(proc)
    return [segment for segment in ours if str(segment) not in mapped]
