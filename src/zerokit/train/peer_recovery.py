"""A restart of a `--memory-checkpoints` run rebuilds its checkpoint from the copies in the nodes' memory.

When launch restarts the job after a fault (`--max-restarts`: train with `--resume auto`, ZEROKIT_LAUNCH_RESTARTS
naming its log), every rank calls `recover` before it looks for the checkpoint to resume. The surviving nodes' stores
(zerokit.train.memory_store) hold each node's own copy and the copy of the node before it in the ring, so with one
node lost every node's files of the last copy are still somewhere. The ranks meet in a folder of the output folder,
`.zerokit-recovery/<restart>`, as they meet on the shared disk anyway:

1. each node's first rank offers the whole copies its store holds that are newer than the disk's newest whole
   checkpoint (`offer-<host>.json`);
2. rank 0 waits for every node's offer (at most OFFER_SECONDS; a node that does not offer in time is not counted
   on) and chooses the newest step of which the offers hold every node's copy, and which node exports each one
   (`decision.json`); none: the disk's checkpoint is resumed, as without memory checkpoints;
3. each exporting node writes its copies into `tmp-checkpoint-N/checkpoint-N` (`exported-<host>.json`);
4. rank 0 checks the folder, adds the last run's record, publishes it as `checkpoint-N` as a save publishes
   (zerokit.outputs.checkpoints.publish) and says so (`done.json`). Every rank waits for that, so every rank then
   finds the same newest whole checkpoint.

A step after the kit's waits (DECISION_SECONDS) ends the run with one line, never a hang. Then each node's store is
emptied: the copies it held are in the checkpoint now, or older than it, and the restarted run makes new ones.
What happened goes into zerokit-run.json as `memory_recovery`: which checkpoint, from memory or disk, and from which
nodes' copies (the steps lost are in `restarts`, zerokit.train.callbacks.fault_cost).
"""

from __future__ import annotations

import hashlib
import json
import shutil
import socket
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from zerokit.foundations.errors import RunFailure
from zerokit.foundations.files import write_json
from zerokit.foundations.restart_log import inherited_events
from zerokit.outputs.checkpoints import PREFIX, STAGING_PREFIX, newest_complete_checkpoint, publish
from zerokit.train.memory_store import NodeStore, read_copy

FOLDER = ".zerokit-recovery"
OFFER_SECONDS = 60.0
DECISION_SECONDS = 300.0
RECORD_NAME = "zerokit-run.json"


class RecoveryStalled(RunFailure):
    """A rank waited for the others' part of the recovery past DECISION_SECONDS."""


def recover(store: NodeStore, output_dir: Path, environ: Mapping[str, str], resume_auto: bool) -> dict[str, Any] | None:
    """Rebuild the newest whole memory checkpoint into output_dir when this start is a launch restart that resumes
    the newest checkpoint (see the module docstring); this node's store emptied either way. The record of what was
    resumed (None: no restart)."""
    events = inherited_events(environ)
    first_on_node = str(environ.get("LOCAL_RANK", "0")) == "0"
    try:
        if not events or not resume_auto:
            return None
        rank = int(environ.get("RANK", "0"))
        world = int(environ.get("WORLD_SIZE", "1"))
        nodes = max(1, world // int(environ.get("LOCAL_WORLD_SIZE") or world))
        token = hashlib.sha256(f"{events[0].get('at')}-{len(events)}".encode()).hexdigest()[:12]
        meeting = output_dir / FOLDER / token
        disk = newest_complete_checkpoint(output_dir)
        disk_step = _step(disk) if disk else 0
        host = socket.gethostname()
        if first_on_node:
            meeting.mkdir(parents=True, exist_ok=True)
            offered = [_offer(copy) for copy in store.whole() if copy.step > disk_step]
            write_json(meeting / f"offer-{host}.json", {"host": host, "copies": offered})
        if rank == 0:
            offers = _wait_for_files(meeting, "offer-", nodes, OFFER_SECONDS)
            write_json(meeting / "decision.json", choose(offers, disk_step))
        decision = _wait_for(meeting / "decision.json", "rank 0's choice of the checkpoint")
        step = decision["step"]
        if step is not None and first_on_node and decision["exporters"].get(host):
            _export(decision["exporters"][host], output_dir / f"{STAGING_PREFIX}{PREFIX}-{step}" / f"{PREFIX}-{step}")
            write_json(meeting / f"exported-{host}.json", {"host": host})
        if rank == 0:
            if step is not None:
                _wait_for_files(meeting, "exported-", len(decision["exporters"]), DECISION_SECONDS, strict=True)
                _publish(output_dir, step)
            write_json(meeting / "done.json", {"step": step})
        _wait_for(meeting / "done.json", "rank 0's publishing of the rebuilt checkpoint")
        return {
            "source": "memory" if step is not None else "disk",
            "checkpoint": f"{PREFIX}-{step}" if step is not None else (disk.name if disk else None),
            "disk_checkpoint": disk.name if disk else None,
            "copies_from": decision["exporters"] if step is not None else {},
        }
    finally:
        if first_on_node:
            store.clear()


def choose(offers: list[dict], disk_step: int) -> dict[str, Any]:
    """The newest step newer than disk_step of which the offers hold every node's copy, and for each node's copy
    the host that exports it: {"step": N or None, "exporters": {host: [copy folders]}}."""
    holders: dict[int, dict[int, tuple[str, str]]] = {}  # step -> node -> (host, folder)
    counts: dict[int, int] = {}
    for offer in offers:
        for copy in offer["copies"]:
            if copy["step"] > disk_step:
                holders.setdefault(copy["step"], {}).setdefault(copy["node"], (offer["host"], copy["folder"]))
                counts[copy["step"]] = copy["nodes"]
    for step in sorted(holders, reverse=True):
        if len(holders[step]) == counts[step]:
            exporters: dict[str, list[str]] = {}
            for host, folder in holders[step].values():
                exporters.setdefault(host, []).append(folder)
            return {"step": step, "exporters": exporters}
    return {"step": None, "exporters": {}}


def _offer(copy) -> dict[str, Any]:
    return {"step": copy.step, "node": copy.node, "nodes": copy.nodes, "world": copy.world, "folder": str(copy.folder)}


def _export(folders: list[str], into: Path) -> None:
    """Copy these whole copies' files (the manifest left out) into the rebuilt checkpoint's staging folder."""
    for folder in map(Path, folders):
        copy = read_copy(folder)
        if copy is None:
            raise RunFailure(
                f"the memory copy {folder} changed while it was rebuilt: resume from the disk: --resume auto"
            )
        for name in copy.files():
            target = into / name
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(folder / name, target)


def _publish(output_dir: Path, step: int) -> None:
    """The rebuilt checkpoint on disk and published, with the last run's record beside its files."""
    from zerokit.train.checkpoint_files import fsync_path, fsync_tree

    staging = output_dir / f"{STAGING_PREFIX}{PREFIX}-{step}"
    written = staging / f"{PREFIX}-{step}"
    if (output_dir / RECORD_NAME).is_file():
        shutil.copyfile(output_dir / RECORD_NAME, written / RECORD_NAME)
    fsync_tree(written)
    publish(written, output_dir / f"{PREFIX}-{step}")
    shutil.rmtree(staging)
    fsync_path(output_dir)


def forget_meetings(output_dir: Path) -> None:
    """Rank 0, once every rank has joined the process group (so has read done.json): the meeting folders go."""
    shutil.rmtree(output_dir / FOLDER, ignore_errors=True)


def _wait_for_files(folder: Path, prefix: str, count: int, seconds: float, strict: bool = False) -> list[dict]:
    """The JSON files of folder named prefix*, once count of them are there or after seconds (strict: an error)."""
    deadline = time.monotonic() + seconds
    while True:
        found = sorted(folder.glob(f"{prefix}*.json"))
        if len(found) >= count or time.monotonic() > deadline:
            break
        time.sleep(0.1)
    if strict and len(found) < count:
        raise RecoveryStalled(
            f"the rebuild of the memory checkpoint waited {seconds:.0f} s for {count - len(found)} node(s) to export "
            "their copies: resume from the disk's checkpoint: --resume auto"
        )
    return [json.loads(path.read_text()) for path in found]


def _wait_for(path: Path, what: str, seconds: float = DECISION_SECONDS) -> dict:
    """The JSON file at path, once it is there; RecoveryStalled after seconds."""
    deadline = time.monotonic() + seconds
    while not path.is_file():
        if time.monotonic() > deadline:
            raise RecoveryStalled(
                f"waited {seconds:.0f} s for {what} ({path}): resume from the disk's checkpoint: --resume auto"
            )
        time.sleep(0.1)
    return json.loads(path.read_text())


def _step(checkpoint: Path) -> int:
    return int(checkpoint.name.rsplit("-", 1)[1])


def store_of(root: Path, output_dir: Path) -> NodeStore:
    return NodeStore.of(root, output_dir, socket.gethostname())
