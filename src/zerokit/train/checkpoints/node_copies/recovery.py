"""A restart of a `--memory-checkpoints` run rebuilds its checkpoint from the copies in the nodes' memory.

When launch restarts the job after a fault (`--max-restarts`: train with `--resume auto`, ZEROKIT_LAUNCH_RESTARTS
naming its log), every rank calls `recover` before it looks for the checkpoint to resume. The surviving nodes' stores
(zerokit.train.checkpoints.node_copies.store) hold each node's own copy and the copy of the node before it in the ring,
so with one node lost every node's files of the last copy are still somewhere. The ranks meet in a folder of the output
folder, `.zerokit-recovery/<restart>`, as they meet on the shared disk anyway:

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
from zerokit.image.provenance import RECORD_NAME
from zerokit.outputs.checkpoints import PREFIX, STAGING_PREFIX, checkpoint_step, newest_complete_checkpoint, publish
from zerokit.train.checkpoints.node_copies.store import Copy, NodeStore, read_copy

FOLDER = ".zerokit-recovery"
OFFER_SECONDS = 60.0  # for every node's offer; one that comes later is not counted on
DECISION_SECONDS = 300.0  # for rank 0's choice, which comes at most OFFER_SECONDS after its start
EXPORT_SECONDS = 600.0  # for the exporters' copies to the shared disk; later: the disk's checkpoint is resumed
DONE_SECONDS = 1800.0  # for rank 0's check and publication (fsync of the whole checkpoint), as --ddp_timeout


class RecoveryStalled(RunFailure):
    """A rank waited for the others' part of the recovery past DECISION_SECONDS."""


def recover(store: NodeStore, output_dir: Path, environ: Mapping[str, str], resume_auto: bool) -> dict[str, Any] | None:
    """Rebuild the newest whole memory checkpoint into output_dir when this start is a launch restart that resumes
    the newest checkpoint (see the module docstring); this node's store emptied either way. The record of what is
    resumed (None: no restart): its `checkpoint` is the rebuilt one's path when `source` is memory."""
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
        disk_step = (checkpoint_step(disk) or 0) if disk else 0
        host = socket.gethostname()
        if first_on_node:
            meeting.mkdir(parents=True, exist_ok=True)
            offered = [_offer(copy) for copy in store.whole() if copy.step > disk_step]
            write_json(meeting / f"offer-{host}.json", {"host": host, "copies": offered})
        if rank == 0:
            offers = _wait_for_files(meeting, "offer-", nodes, OFFER_SECONDS)
            write_json(meeting / "decision.json", choose(offers, disk_step))
        decision = _wait_for(meeting / "decision.json", "rank 0's choice of the checkpoint", DECISION_SECONDS)
        step = decision["step"]
        staging = output_dir / f"{STAGING_PREFIX}{PREFIX}-{step}"
        if step is not None and first_on_node and decision["exporters"].get(host):
            write_json(
                meeting / f"exported-{host}.json", _export(decision["exporters"][host], staging / f"{PREFIX}-{step}")
            )
        if rank == 0:
            write_json(meeting / "done.json", _finish(output_dir, meeting, decision, staging))
        done = _wait_for(meeting / "done.json", "rank 0's publishing of the rebuilt checkpoint", DONE_SECONDS)
        return {
            "source": "memory" if done["checkpoint"] else "disk",
            "checkpoint": done["checkpoint"] or (str(disk) if disk else None),
            "disk_checkpoint": disk.name if disk else None,
            "copies_from": {h: [c["folder"] for c in copies] for h, copies in decision["exporters"].items()}
            if done["checkpoint"]
            else {},
            "not_rebuilt": done.get("why"),
        }
    finally:
        if first_on_node:
            store.clear()


def choose(offers: list[dict], disk_step: int) -> dict[str, Any]:
    """The newest step newer than disk_step of which the offers hold every node's copy, all of one job (the same node
    and rank counts), and for each node's copy the host that exports it:
    {"step": N or None, "exporters": {host: [{"folder", "files"}]}}."""
    holders: dict[int, dict[int, tuple[str, dict]]] = {}  # step -> node -> (host, its copy)
    shapes: dict[int, set[tuple[int, int]]] = {}  # step -> the (nodes, world) its copies say
    for offer in offers:
        for copy in offer["copies"]:
            if copy["step"] > disk_step:
                holders.setdefault(copy["step"], {}).setdefault(copy["node"], (offer["host"], copy))
                shapes.setdefault(copy["step"], set()).add((copy["nodes"], copy["world"]))
    for step in sorted(holders, reverse=True):
        (count, _), *others = shapes[step]
        if not others and len(holders[step]) == count:
            exporters: dict[str, list[dict]] = {}
            for host, copy in holders[step].values():
                exporters.setdefault(host, []).append({"folder": copy["folder"], "files": copy["files"]})
            return {"step": step, "exporters": exporters}
    return {"step": None, "exporters": {}}


def _offer(copy: Copy) -> dict[str, Any]:
    return {
        "step": copy.step,
        "node": copy.node,
        "nodes": copy.nodes,
        "world": copy.world,
        "folder": str(copy.folder),
        "files": copy.files(),
    }


def _export(copies: list[dict], into: Path) -> dict[str, Any]:
    """Copy these whole copies' files (the manifest left out) into the rebuilt checkpoint's staging folder; what
    happened, for rank 0 ({"ok"}, and the error when not)."""
    try:
        for copy in copies:
            folder = Path(copy["folder"])
            if read_copy(folder) is None:
                raise OSError(f"the memory copy {folder} is no longer whole")
            for name in copy["files"]:
                target = into / name
                target.parent.mkdir(parents=True, exist_ok=True)
                shutil.copyfile(folder / name, target)
    except OSError as error:
        return {"ok": False, "error": str(error)}
    return {"ok": True}


def _finish(output_dir: Path, meeting: Path, decision: dict, staging: Path) -> dict[str, Any]:
    """Rank 0: once every exporter has written its copies, the rebuilt checkpoint checked (every file at the size
    its copy's manifest says) and published; where any of that fails, the staging folder is removed and the disk's
    checkpoint is resumed instead. done.json's content: {"checkpoint": its path or None, "why"}."""
    step = decision["step"]
    if step is None:
        return {"checkpoint": None, "why": "no step newer than the disk's has every node's copy"}
    exported = _wait_for_files(meeting, "exported-", len(decision["exporters"]), EXPORT_SECONDS)
    written = staging / f"{PREFIX}-{step}"
    expected = {
        name: size
        for copies in decision["exporters"].values()
        for copy in copies
        for name, size in copy["files"].items()
    }
    short = [name for name, size in expected.items() if not _has_size(written / name, size)]
    why = None
    if failed := [e["error"] for e in exported if not e.get("ok")]:
        why = "; ".join(failed)
    elif len(exported) < len(decision["exporters"]):
        why = f"{len(decision['exporters']) - len(exported)} node(s) did not export in {EXPORT_SECONDS:.0f} s"
    elif short:
        why = f"{len(short)} file(s) missing or cut short, {short[0]} first"
    if why is not None:
        shutil.rmtree(staging, ignore_errors=True)
        return {"checkpoint": None, "why": f"the copies of step {step} could not be rebuilt: {why}"}
    _publish(output_dir, step)
    return {"checkpoint": str(output_dir / f"{PREFIX}-{step}"), "why": None}


def _has_size(path: Path, size: int) -> bool:
    try:
        return path.stat().st_size == size
    except OSError:
        return False


def _publish(output_dir: Path, step: int) -> None:
    """The rebuilt checkpoint on disk and published, with the last run's record beside its files."""
    from zerokit.train.checkpoints.files import fsync_path, fsync_tree

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


def _wait_for_files(folder: Path, prefix: str, count: int, seconds: float) -> list[dict]:
    """The JSON files of folder named prefix*, once count of them are there or after seconds."""
    deadline = time.monotonic() + seconds
    while True:
        found = sorted(folder.glob(f"{prefix}*.json"))
        if len(found) >= count or time.monotonic() > deadline:
            return [json.loads(path.read_text()) for path in found]
        time.sleep(0.1)


def _wait_for(path: Path, what: str, seconds: float) -> dict:
    """The JSON file at path, once it is there; RecoveryStalled after seconds."""
    deadline = time.monotonic() + seconds
    while not path.is_file():
        if time.monotonic() > deadline:
            raise RecoveryStalled(
                f"waited {seconds:.0f} s for {what} ({path}): resume from the disk's checkpoint: --resume auto"
            )
        time.sleep(0.1)
    return json.loads(path.read_text())


def store_of(root: Path, output_dir: Path) -> NodeStore:
    return NodeStore.of(root, output_dir, socket.gethostname())
