"""Memory checkpoints (`train --memory-checkpoints K`): where a node keeps them, and what makes a copy whole.

Every K steps each rank's checkpoint files are written into its node's host memory: a tmpfs folder
(`/dev/shm/zerokit-memory-checkpoints` unless --memory-checkpoint-dir names another), under a key of the run's
output folder and the node's host name:

    <root>/<run key>/<host>/own/checkpoint-N    this node's ranks' files of step N (and the run-wide files on the
                                                node of rank 0), as the disk checkpoint lays them out
    <root>/<run key>/<host>/peer/checkpoint-N   the same of the node before this one in the ring of nodes
                                                (zerokit.train.checkpoints.node_copies.ring), sent here after each copy

A copy is whole when its manifest (MANIFEST: the step, the node it holds, the job's node and rank counts, every
file's size) is there and every file has its size: the manifest is written last, and a folder is renamed into
place only then, so a copy cut off by a fault is never taken. Each side keeps its two newest whole copies: a node
that dies while step S's copies travel leaves some of them unsent, and the restart then needs every node's copy
of the step before, S-K. Step S-K's are dropped once step S+K's copy is sealed: the ranks' agreement on S+K's
files comes after every node's first rank has finished sending S's (one save at a time). So the store holds at
most two generations of a node's own share and two of its peer's, and the one being written: `check_room` makes
sure of that room up front.
When a node is lost, the restart rebuilds the checkpoint from the copies the surviving nodes hold
(zerokit.train.checkpoints.node_copies.recovery).
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from contextlib import suppress
from dataclasses import dataclass
from pathlib import Path

from zerokit.foundations.errors import UserError
from zerokit.foundations.files import write_json
from zerokit.outputs.checkpoints import CHECKPOINT_NAME, PREFIX, STAGING_PREFIX, checkpoint_step

DEFAULT_ROOT = Path("/dev/shm/zerokit-memory-checkpoints")
MANIFEST = "zerokit-memory.json"
SIDES = ("own", "peer")


@dataclass(frozen=True)
class Copy:
    """One whole copy in a node's store: node `node`'s files (of `nodes`, `world` ranks) at `step`."""

    folder: Path
    step: int
    node: int
    nodes: int
    world: int

    def files(self) -> dict[str, int]:
        """Its files (relative paths) and their sizes, the manifest left out."""
        return dict(json.loads((self.folder / MANIFEST).read_text())["files"])


@dataclass(frozen=True)
class NodeStore:
    """This node's store of a run's memory checkpoints (see the module docstring)."""

    folder: Path  # <root>/<run key>/<host>

    @classmethod
    def of(cls, root: Path, output_dir: Path, host: str) -> NodeStore:
        return cls(root / run_key(output_dir) / host)

    def side(self, side: str) -> Path:
        return self.folder / side

    def staging(self, side: str, step: int) -> Path:
        """Where a copy of step is written before it is whole: <side>/tmp-checkpoint-N."""
        return self.side(side) / f"{STAGING_PREFIX}{PREFIX}-{step}"

    def whole(self) -> list[Copy]:
        """The whole copies this node holds, its own and its peer's."""
        found = []
        for side in SIDES:
            if not self.side(side).is_dir():
                continue
            for folder in self.side(side).iterdir():
                if CHECKPOINT_NAME.fullmatch(folder.name) and (copy := read_copy(folder)) is not None:
                    found.append(copy)
        return found

    def clear(self) -> None:
        """Drop every copy (a new run's start, or its end): they take host memory."""
        shutil.rmtree(self.folder, ignore_errors=True)
        with suppress(OSError):
            self.folder.parent.rmdir()  # the run's, once no node's store is left in it


def run_key(output_dir: Path) -> str:
    """The store's name for a run: its output folder's, the same on every node and across restarts."""
    return hashlib.sha256(str(Path(output_dir).resolve()).encode()).hexdigest()[:16]


def seal(written: Path, side: Path, step: int, node: int | None = None, nodes: int = 1, world: int = 1) -> Path:
    """Make a written copy of step whole in side (`own` or `peer`): with node given, its manifest is written last
    (a node's own copy); without, the manifest that came with it (a peer's) must match every file. The folder is
    renamed to <side>/checkpoint-N and the side's older copies dropped. The copy's folder."""
    if node is not None:
        files = {
            str(path.relative_to(written)): path.stat().st_size
            for path in sorted(written.rglob("*"))
            if path.is_file() and path.name != MANIFEST
        }
        manifest = {"step": step, "node": node, "nodes": nodes, "world": world, "files": files}
        write_json(written / MANIFEST, manifest)
    elif read_copy(written) is None:
        raise OSError(f"the copy received in {written} is not whole (a file missing or cut short)")
    final = side / f"{PREFIX}-{step}"
    shutil.rmtree(final, ignore_errors=True)
    os.replace(written, final)
    older = ((checkpoint_step(f), f) for f in side.iterdir())
    sealed = sorted((number, f) for number, f in older if number is not None and number < step)
    kept = {final, *(folder for _, folder in sealed[-1:])}  # and the copy before: see the module docstring
    for other in side.iterdir():
        found = CHECKPOINT_NAME.search(other.name)
        if other not in kept and found and int(found.group(1)) <= step:  # a later copy's staging stays
            shutil.rmtree(other, ignore_errors=True)
    return final


def read_copy(folder: Path) -> Copy | None:
    """The copy in folder if it is whole: its manifest read, every file there at its size; else None."""
    try:
        manifest = json.loads((folder / MANIFEST).read_text())
        copy = Copy(
            folder, int(manifest["step"]), int(manifest["node"]), int(manifest["nodes"]), int(manifest["world"])
        )
        files = manifest["files"]
        if all((folder / name).stat().st_size == size for name, size in files.items()):
            return copy
    except (OSError, ValueError, KeyError, TypeError):
        pass
    return None


def copy_bytes(parameters: int, trainable: int, node_ranks: int, world: int) -> int:
    """A node's share of a checkpoint, at most: its ranks' part of the fp32 weights and Adam's two moments of what
    is trained (ZeRO's optimizer files), and the run-wide model files (fp32 weights, twice: HF's and DeepSpeed's)
    that the node of rank 0 holds."""
    return (4 * parameters + 8 * trainable) * node_ranks // world + 8 * parameters


def copies_need(share: int) -> int:
    """What a store holds at most, for a node share of `share` bytes (copy_bytes): two generations of its own copy
    and of its peer's, and a third of one being written or received."""
    return 5 * share


def check_room(root: Path, need: int) -> None:
    """Refuse, before training, a store that cannot hold this node's copies (need bytes: see copies_need)."""
    from zerokit.cluster.node_memory import host_available

    existing = root
    while not existing.exists():
        existing = existing.parent
    stat = os.statvfs(existing)
    free = min(stat.f_bavail * stat.f_frsize, host_available())
    if free < need:
        raise UserError(
            f"--memory-checkpoints: this node's copies (two of its own, two of its peer's) need "
            f"{need / 2**30:.1f} GiB in {root}, and {free / 2**30:.1f} GiB is free there (host memory included): "
            "give a larger tmpfs with --memory-checkpoint-dir, or leave --memory-checkpoints out"
        )
