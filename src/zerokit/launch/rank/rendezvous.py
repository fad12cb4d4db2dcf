"""The start-up wait for the peers, bounded: a rank whose peers never start says so, naming them.

Why: torch.distributed's env:// rendezvous waits up to the process group's timeout (30 minutes for
gloo, HF and DeepSpeed) for ranks that may never come (a node that failed to start, a typo in a host
list), then fails with "Socket Timeout" or a store error that names no rank. Before it, each rank
here meets the others on the same store (rank 0's TCPStore at MASTER_ADDR:MASTER_PORT, which torch's
rendezvous then shares: multi_tenant) and counts them, up to the stall timeout; on time out it fails
with one line: how many ranks arrived, which are missing.

The store of this wait is kept for the life of the process, so that torch's rendezvous finds rank 0's
server still listening (torch reuses a multi-tenant server on the same port, if it is alive).
"""

from __future__ import annotations

import socket
import time
from collections.abc import Mapping
from datetime import timedelta

from zerokit.foundations.errors import RunFailure

ARRIVED = "zerokit/rendezvous/arrived"
POLL_SECONDS = 0.2
_kept: list[object] = []  # the stores: see the module's docstring


class PeersMissing(RunFailure):
    """Some ranks never reached the rendezvous within the stall timeout."""


def ranks_text(ranks: list[int]) -> str:
    """`rank 3`, `ranks 1-7, 9`: runs of consecutive ranks as ranges."""
    runs: list[list[int]] = []
    for rank in sorted(ranks):
        if runs and rank == runs[-1][-1] + 1:
            runs[-1].append(rank)
        else:
            runs.append([rank])
    parts = [f"{run[0]}-{run[-1]}" if len(run) > 2 else ", ".join(map(str, run)) for run in runs]
    return ("rank " if len(ranks) == 1 else "ranks ") + ", ".join(parts)


def wait_for_peers(environ: Mapping[str, str], timeout: float, rank: int, world_size: int) -> None:
    """Return once all `world_size` ranks reached the store; raise PeersMissing after `timeout` seconds."""
    from torch.distributed import TCPStore

    address, port = environ["MASTER_ADDR"], int(environ["MASTER_PORT"])
    where = f"{address}:{port}"
    started = time.monotonic()
    try:
        store = TCPStore(
            address,
            port,
            world_size,
            is_master=rank == 0,
            timeout=timedelta(seconds=timeout),
            wait_for_workers=False,
            multi_tenant=True,
            use_libuv=environ.get("USE_LIBUV", "1") == "1",
        )
    except RuntimeError as err:  # a client whose rank 0 never listened (DistStoreError, DistNetworkError)
        raise PeersMissing(
            f"rendezvous: rank {rank} of {world_size} waited {timeout:g} s for rank 0's store at {where}, which "
            f"never answered; missing: rank 0, which counts the others (not started, or MASTER_ADDR/MASTER_PORT "
            f"point elsewhere) ({str(err).splitlines()[0] if str(err) else type(err).__name__})"
        ) from None
    _kept.append(store)
    store.set(f"{ARRIVED}/{rank}", socket.gethostname())
    arrived = store.add(ARRIVED, 1)
    while arrived < world_size:
        if time.monotonic() - started >= timeout:
            missing = [r for r in range(world_size) if not store.check([f"{ARRIVED}/{r}"])]
            raise PeersMissing(
                f"rendezvous: rank {rank} waited {timeout:g} s at {where}: {arrived} of {world_size} ranks arrived; "
                f"missing: {ranks_text(missing)} (not started, or failed before the rendezvous: see their nodes' "
                "logs); raise --stall-timeout if they are only slow to start"
            )
        time.sleep(POLL_SECONDS)
        arrived = store.add(ARRIVED, 0)
