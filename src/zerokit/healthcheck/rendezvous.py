"""Every rank meets at rank 0's store within a bound; rank 0 names who never arrived, by host.

Each rank writes its host into the store and counts itself in. Rank 0 waits up to `timeout` seconds
for all of them; ranks still missing are named by the host the plan put them on (`hosts`, node
order, `per_node` ranks each). A rank that cannot reach rank 0's store names itself, the address and
the port. Every wait is bounded; nothing here can hang.
"""

from __future__ import annotations

import time
from datetime import timedelta

PREFIX = "zerokit-check/"
POLL_SECONDS = 0.05
REACH_FIX = (
    "let this node reach {address} on TCP port {port} (a firewall rule dropping it? `nc -zv {address} {port}`), "
    "or choose the network that reaches it with --ifname NAME (or IFNAME= in the job scripts)"
)


class CheckFailed(Exception):
    """The check cannot go on; the message names the host and the fix."""


def expected_host(rank: int, hosts: tuple[str, ...], per_node: int) -> str | None:
    node = rank // max(1, per_node)
    return hosts[node] if node < len(hosts) else None


def missing_line(missing: list[int], hosts: tuple[str, ...], per_node: int, timeout: float) -> str:
    by_host: dict[str, list[int]] = {}
    for rank in missing:
        by_host.setdefault(expected_host(rank, hosts, per_node) or "an unknown host", []).append(rank)
    named = "; ".join(f"{host} (rank {', '.join(map(str, ranks))})" for host, ranks in by_host.items())
    return (
        f"{len(missing)} rank(s) never arrived within {timeout:g} s: {named}; fix: see that node's own "
        "message in the job log (it cannot reach the main address: firewall, interface, --ifname), "
        "or leave the node out (sbatch --exclude=HOST)"
    )


def meet(*, rank: int, world: int, address: str, port: int, timeout: float, host: str,
         hosts: tuple[str, ...], per_node: int):  # fmt: skip
    """The connected store (a torch TCPStore), once every rank has arrived; raises CheckFailed."""
    from torch.distributed import TCPStore

    try:
        store = TCPStore(address, port, None, rank == 0, timedelta(seconds=timeout), wait_for_workers=False)
    except (RuntimeError, OSError) as err:
        reason = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
        if rank == 0:
            raise CheckFailed(
                f"{host}: rank 0 cannot listen on port {port} ({reason}); fix: pass a free port with --master-port PORT"
            ) from err
        raise CheckFailed(
            f"{host}: rank {rank} cannot reach the main address {address}:{port} within {timeout:g} s "
            f"({reason}); fix: " + REACH_FIX.format(address=address, port=port)
        ) from err
    store.set(f"{PREFIX}host/{rank}", host)
    store.add(f"{PREFIX}arrived", 1)
    deadline = time.monotonic() + timeout
    if rank == 0:
        while store.add(f"{PREFIX}arrived", 0) < world and time.monotonic() < deadline:
            time.sleep(POLL_SECONDS)
        missing = [r for r in range(world) if not store.check([f"{PREFIX}host/{r}"])]
        if missing:
            message = missing_line(missing, hosts, per_node, timeout)
            store.set(f"{PREFIX}abort", message)
            raise CheckFailed(message)
        store.set(f"{PREFIX}go", "1")
        return store
    deadline += timeout / 2  # rank 0 may have started its own wait a little later than this rank arrived
    while time.monotonic() < deadline:
        if store.check([f"{PREFIX}abort"]):
            raise CheckFailed(f"{host}: rank {rank} stops: rank 0 reports {store.get(f'{PREFIX}abort').decode()}")
        if store.check([f"{PREFIX}go"]):
            return store
        time.sleep(POLL_SECONDS)
    raise CheckFailed(f"{host}: rank {rank} reached {address}:{port} but rank 0 did not start the check within "
                      f"{timeout:g} s; fix: see rank 0's message in the job log")  # fmt: skip
