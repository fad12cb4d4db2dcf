"""Heartbeats from each node's launch to the head node's (`launch --node-timeout`), so that a node cut off is
seen in seconds, whatever the launcher.

A node that died ends its command at the head (pdsh's ssh, srun's step). A node cut off from the network ends
nothing: its ranks and the others' wait in their collectives (gloo's timeout is 30 minutes), ssh notices only
after its keepalives (30 s, pdsh), and srun only once slurmctld counts the node down (SlurmdTimeout, 300 s by
default). So, with restarts, the head's launch listens on a port of its own (HeartbeatWatch) and names it to
every node's launch (VARIABLE, forwarded as the job's other variables); each node's launch connects, says its
host's name and sends a byte every EVERY seconds (send_heartbeats). A host heard from once and then silent for
--node-timeout seconds is counted lost: the supervisor ends its command at the head, and the restart probes it
as any failed node (zerokit.launch.restarts.head_node). A connection that closes is a node's launch that ended, seen
by its command's end instead; a node never heard from is never counted lost (a head it cannot reach).
"""

from __future__ import annotations

import contextlib
import socket
import sys
import threading
import time
from collections.abc import Sequence

VARIABLE = "ZEROKIT_HEAD_HEARTBEAT"  # host:port of the head's watch, for the nodes' launches
EVERY = 1.0  # seconds between two heartbeats
DEFAULT_NODE_TIMEOUT = 30.0  # seconds of silence that count a node lost: ssh's keepalives' figure


class HeartbeatWatch:
    """The head's end: who was heard from, and when last."""

    def __init__(self, hosts: Sequence[str]) -> None:
        self.server = socket.create_server(("", 0))
        self.address = f"{head_address(hosts)}:{self.server.getsockname()[1]}"
        self.last: dict[str, float] = {}
        self.lock = threading.Lock()
        threading.Thread(target=self._accept, name="heartbeat-watch", daemon=True).start()

    def _accept(self) -> None:
        with contextlib.suppress(OSError):  # closed
            while True:
                connection, _ = self.server.accept()
                threading.Thread(target=self._listen, args=(connection,), daemon=True).start()

    def _listen(self, connection: socket.socket) -> None:
        host = None
        with connection, contextlib.suppress(OSError):
            reader = connection.makefile("rb")
            host = reader.readline().decode(errors="replace").strip()
            while reader.read1(64):  # the naming line's own beat too
                with self.lock:
                    self.last[host] = time.monotonic()
        if host:
            with self.lock:  # its launch ended: its command's end says how
                self.last.pop(host, None)

    def silent(self, timeout: float) -> dict[str, float]:
        """The hosts heard from and then silent for more than timeout seconds -> for how long; each said once."""
        now = time.monotonic()
        with self.lock:
            quiet = {host: now - seen for host, seen in self.last.items() if now - seen > timeout}
            for host in quiet:
                del self.last[host]
        return quiet

    def close(self) -> None:
        self.server.close()


class HeadHeartbeats:
    """The head's watch for a launch that restarts its nodes (--node-timeout): opened once, where its plan first
    names the hosts that beat (zerokit.launch.plan asks for `address`); the hosts counted lost since (`lost`)."""

    def __init__(self, timeout: float) -> None:
        self.timeout = timeout
        self.watch: HeartbeatWatch | None = None

    def address(self, hosts: Sequence[str]) -> str:
        if self.watch is None:
            self.watch = HeartbeatWatch(hosts)
        return self.watch.address

    def lost(self) -> dict[str, float]:
        return self.watch.silent(self.timeout) if self.watch is not None else {}


def head_address(hosts: Sequence[str]) -> str:
    """This host's address as the job's hosts reach it: the source of its route to the first of them that is not
    a loopback address (the head is often the first host itself)."""
    for host in hosts:
        with contextlib.suppress(OSError):
            probe = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
            with probe:
                probe.connect((socket.gethostbyname(host), 9))  # no packet is sent: the route is looked up
                source = probe.getsockname()[0]
            if not source.startswith("127."):
                return source
    return socket.gethostname()


def send_heartbeats(address: str, host: str) -> None:
    """A node's end, in a thread of its launch: connect to the head's watch, name host, then a byte every EVERY
    seconds while this launch runs. A head that cannot be reached is said once, and nothing else happens."""

    def beat() -> None:
        name, _, port = address.rpartition(":")
        try:
            with socket.create_connection((name, int(port)), timeout=10) as connection:
                connection.sendall(f"{host}\n".encode())
                while True:
                    connection.sendall(b".")
                    time.sleep(EVERY)
        except (OSError, ValueError) as err:
            print(f"launch: heartbeats to the head node at {address} stopped ({err})", file=sys.stderr, flush=True)

    threading.Thread(target=beat, name="heartbeat", daemon=True).start()
