"""Memory checkpoints (`train --memory-checkpoints K`): a copy is taken only whole, a restart rebuilds the newest
step whose every node's copy survives, and the flags that cannot work are refused before torch. The ring over
real nodes, a node killed and the run resumed on the uninterrupted curve: tests/cluster/test_launch_cluster.py."""

from __future__ import annotations

from pathlib import Path

import pytest

from zerokit.foundations.errors import UserError
from zerokit.launch.job import read_job
from zerokit.train.checkpoints.node_copies.recovery import choose
from zerokit.train.checkpoints.node_copies.saver import MemoryCopyFailed, naming_a_failed_copy
from zerokit.train.checkpoints.node_copies.store import NodeStore, check_room, read_copy, seal
from zerokit.train.cli import parse


def written_copy(folder: Path, files: dict[str, bytes]) -> Path:
    for name, data in files.items():
        (folder / name).parent.mkdir(parents=True, exist_ok=True)
        (folder / name).write_bytes(data)
    return folder


def test_a_copy_is_whole_only_with_every_file_at_its_size_and_each_side_keeps_its_two_newest(tmp_path: Path):
    store = NodeStore(tmp_path / "run" / "node1")

    def copy_of(step: int) -> None:
        written = written_copy(store.staging("own", step) / f"checkpoint-{step}", {"a.pt": b"x" * 10, "g/b.pt": b"y"})
        seal(written, store.side("own"), step, node=0, nodes=3, world=3)

    for step in (4, 5, 6):
        copy_of(step)
    later = store.staging("own", 7)  # the next copy, being written while step 6's is sealed
    later.mkdir(parents=True)
    # Step 5's stays until step 7's is sealed: a node lost while step 6's copies travel needs every node's step 5.
    assert sorted(p.name for p in store.side("own").iterdir()) == ["checkpoint-5", "checkpoint-6", "tmp-checkpoint-7"]
    copies = sorted(store.whole(), key=lambda c: c.step)
    assert [(c.step, c.node, c.nodes, c.world) for c in copies] == [(5, 0, 3, 3), (6, 0, 3, 3)]
    assert copies[1].files() == {"a.pt": 10, "g/b.pt": 1}

    (copies[1].folder / "a.pt").write_bytes(b"x" * 4)  # cut short
    assert read_copy(copies[1].folder) is None and [c.step for c in store.whole()] == [5]

    # A peer's copy comes with its manifest; one that lost a file on the way is refused, not taken.
    received = written_copy(store.staging("peer", 6), {"a.pt": b"x" * 10})
    (received / "zerokit-memory.json").write_text(
        '{"step": 6, "node": 2, "nodes": 3, "world": 3, "files": {"a.pt": 10, "b.pt": 3}}'
    )
    with pytest.raises(OSError, match="not whole"):
        seal(received, store.side("peer"), 6)
    store.clear()
    assert not (tmp_path / "run").exists()


def offer(host: str, *copies: tuple[int, int], world: int = 3) -> dict:
    return {
        "host": host,
        "copies": [
            {"step": s, "node": n, "nodes": 3, "world": world, "folder": f"/{host}/{s}/{n}", "files": {f"r{n}.pt": 1}}
            for s, n in copies
        ],
    }


def test_the_newest_step_whose_every_node_survives_is_rebuilt_from_whoever_holds_each_copy():
    # Node 3 (index 2) is lost: node1 holds its own copies and node3's (its peer), node2 its own and node1's.
    # Step 7's swap was cut off: node3's copy of it never reached node1.
    offers = [offer("node1", (6, 0), (6, 2), (7, 0)), offer("node2", (6, 1), (6, 0), (7, 1), (7, 0))]
    decision = choose(offers, disk_step=4)
    assert decision["step"] == 6
    chosen = sorted(copy["folder"] for copies in decision["exporters"].values() for copy in copies)
    assert chosen == ["/node1/6/0", "/node1/6/2", "/node2/6/1"]
    assert decision["exporters"]["node2"] == [{"folder": "/node2/6/1", "files": {"r1.pt": 1}}]  # sizes, to check
    assert choose(offers, disk_step=6) == {"step": None, "exporters": {}}  # the disk's is as new: resumed from there
    assert choose([offers[1]], disk_step=4)["step"] is None  # two nodes lost: no step is whole
    # Copies of one step from two jobs (a spare's store left by another job's run of this folder) never mix.
    assert choose([offers[0], offer("node2", (6, 1), world=6)], disk_step=4)["step"] is None


def test_memory_checkpoints_refuse_what_they_cannot_ride_on(tmp_path: Path):
    with pytest.raises(UserError, match="--memory-checkpoints needs --checkpoint-write background"):
        parse(["--memory-checkpoints", "1", "--checkpoint-write", "sync"], {})
    with pytest.raises(UserError, match="must be at least 1"):
        parse(["--memory-checkpoints", "0"], {})
    options, _ = parse([], {"ZEROKIT_MEMORY_CHECKPOINTS": "2"})
    assert options.memory_checkpoints == 2
    with pytest.raises(UserError, match=r"need 1073741824\.0 GiB in .*: give a larger tmpfs"):
        check_room(tmp_path / "store", 1 << 60)


def test_launch_reads_that_a_restart_may_resume_from_memory():
    train = ("python", "-m", "zerokit", "train", "--output-dir", "out")
    assert read_job((*train, "--memory-checkpoints", "1"), {}).memory_checkpoints
    assert read_job(train, {"ZEROKIT_MEMORY_CHECKPOINTS": "4"}).memory_checkpoints
    assert not read_job(train, {}).memory_checkpoints
    assert not read_job(train, {"ZEROKIT_MEMORY_CHECKPOINTS": "0"}).memory_checkpoints


def test_a_failed_copy_ends_the_run_in_one_line_naming_the_store(tmp_path: Path):
    with pytest.raises(MemoryCopyFailed) as caught, naming_a_failed_copy(tmp_path / "store", "checkpoint-6"):
        raise OSError(28, "No space left on device")
    said = str(caught.value)
    assert "\n" not in said and str(tmp_path / "store") in said and "No space left on device" in said
    assert "--memory-checkpoint-dir" in said and "the disk's checkpoints are intact: --resume auto" in said


def swap_on_a_node(rank: int, tmp: str) -> None:
    """One node's first rank of a 2-node ring (gloo over a file), swapping its copy in 7-byte pieces."""
    import torch.distributed as dist

    from zerokit.train.checkpoints.node_copies import ring

    dist.init_process_group("gloo", init_method=f"file://{tmp}/rendezvous", rank=rank, world_size=2)
    ring.CHUNK = 7
    node_ring = ring.Ring(ring.Nodes.of(["node1", "node2"]), rank)
    copy = written_copy(Path(tmp) / f"own-{rank}", {"zerokit-memory.json": b"{}", "empty": b"",
                                                   "g/big.pt": bytes(range(rank, rank + 40))})  # fmt: skip
    received = node_ring.exchange(copy, Path(tmp) / f"peer-{rank}")
    assert received == 42
    dist.destroy_process_group()


def test_the_ring_swaps_copies_in_pieces_with_the_next_node(tmp_path: Path):
    """Two ranks on two 'nodes', real gloo: each receives the other's copy, byte for byte, an empty file too."""
    import torch.multiprocessing as mp

    mp.spawn(swap_on_a_node, args=(str(tmp_path),), nprocs=2)
    for rank in (0, 1):
        other = 1 - rank
        peer = tmp_path / f"peer-{rank}"
        assert (peer / "g" / "big.pt").read_bytes() == bytes(range(other, other + 40))
        assert (peer / "empty").read_bytes() == b"" and (peer / "zerokit-memory.json").read_bytes() == b"{}"
