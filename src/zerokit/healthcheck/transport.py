"""The transport between two nodes: what both ends share, from each node's fabric as doctor reads it.

NCCL runs a pair of nodes over its IB verbs only when both have an active IB/RoCE port of one link layer,
over a net plugin only when both load the same one, else over TCP sockets on NCCL_SOCKET_IFNAME's interface
(launch sets it: --ifname, else the route to the main node, zerokit.cluster.nic). CPU ranks measure gloo,
TCP whatever the fabric. A pair that NCCL runs over sockets while either node has a fabric is slow for that
reason, and the verdict says so with the fix.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

from zerokit.doctor.transport import PLUGIN_FIX, SYS, fabric_text, gather, nccl_choice, verbs_devices

VERBS = {"ib": "IB verbs", "roce": "RoCE"}  # NodeTransport kinds that are NCCL's own IB transport
NO_FABRIC = "no IB/RoCE, EFA or Slingshot device"
MISMATCH_FIX = (
    "give both nodes an active IB/RoCE port of one link layer (ibstat; `doctor --multi-node` on each) and check "
    "that NCCL_IB_HCA names it on both, or leave the node out (sbatch --exclude=HOST); docs/network.md"
)


@dataclass(frozen=True)
class NodeTransport:
    """One node's side of its pairs; a node's facts carry it as a dict (asdict)."""

    kind: str  # what NCCL takes from this node: "ib", "roce", "plugin:<as named>" or "sockets"
    detail: str  # the ports it uses ("mlx5_0:1 200 Gb/sec (4X HDR)") or the plugin; "" for sockets
    interface: str  # the sockets' interface: NCCL_SOCKET_IFNAME (else GLOO_SOCKET_IFNAME), else "default"
    fabric: str = ""  # every port and Slingshot NIC of the node, whatever NCCL makes of them ("" none)
    has_fabric: bool = False  # an active port or a Slingshot NIC: something faster than sockets is there
    rate: float = 0.0  # bytes/s of its fastest active port (0: none, or unreadable)
    problem: str = ""  # doctor's words: why NCCL takes sockets on this node beside its fabric
    fix: str = ""

    def holds(self) -> str:
        """What the node has, for a sentence: "mlx5_0:1 ACTIVE ... InfiniBand", the plugin too where named."""
        held = self.fabric or NO_FABRIC
        return f"{held}, net plugin {self.detail}" if self.kind.startswith("plugin:") else held


@dataclass(frozen=True)
class PairTransport:
    kind: str  # a NodeTransport kind both ends share, "sockets", or the CPU ranks' backend ("gloo")
    text: str  # "IB verbs (mlx5_0:1 200 Gb/sec (4X HDR))", "TCP sockets (eth0)", "gloo over TCP (eth0)"


def socket_interface(environ: Mapping[str, str]) -> str:
    return environ.get("NCCL_SOCKET_IFNAME") or environ.get("GLOO_SOCKET_IFNAME") or "default"


def node_transport(
    environ: Mapping[str, str], sys_root: Path = SYS, verbs: Callable[[], int | None] = verbs_devices
) -> NodeTransport:
    fabric = gather(environ, sys_root, verbs)
    choice = nccl_choice(fabric)
    detail = ""
    if choice.kind in VERBS:
        detail = ", ".join(f"{p.device}:{p.port} {p.rate}" for p in fabric.active)
    elif choice.kind.startswith("plugin:"):
        detail = fabric.plugin
    return NodeTransport(
        kind=choice.kind,
        detail=detail,
        interface=socket_interface(environ),
        fabric=fabric_text(fabric),
        has_fabric=bool(fabric.active or fabric.cxi),
        rate=max((port_rate(p.rate) for p in fabric.active), default=0.0),
        problem=choice.problem,
        fix=choice.fix,
    )


def port_rate(rate: str) -> float:
    """bytes/s of a port's rate as /sys gives it ("200 Gb/sec (4X HDR)"); 0 when it reads otherwise."""
    number, _, unit = rate.partition(" ")
    try:
        return float(number) * 1e9 / 8 if unit.startswith("Gb/s") else 0.0
    except ValueError:
        return 0.0


def node_transports(facts: Mapping[str, Mapping]) -> dict[str, NodeTransport]:
    return {host: NodeTransport(**f["transport"]) for host, f in facts.items()}


def pair_transport(a: NodeTransport, b: NodeTransport, backend: str) -> PairTransport:
    """What NCCL runs the pair over: only what both ends share; gloo (CPU ranks) is TCP whatever they have."""
    interfaces = either(a.interface, b.interface)
    if backend != "nccl":
        return PairTransport(backend, f"{backend} over TCP ({interfaces})")
    if a.kind == b.kind and a.kind in VERBS:
        return PairTransport(a.kind, f"{VERBS[a.kind]} ({either(a.detail, b.detail)})")
    if a.kind == b.kind and a.kind.startswith("plugin:"):
        return PairTransport(a.kind, f"net plugin {a.detail}")
    return PairTransport("sockets", f"TCP sockets ({interfaces})")


def either(a: str, b: str) -> str:
    """One value where both ends agree, else both."""
    return a if a == b else f"{a} / {b}"


def pair_name(a: str, b: str) -> str:
    return f"{a} <-> {b}"


def carried(bandwidth: float, transport: str) -> str:
    """A pair's figure and its transport, as the report's pair line and a finding say it."""
    return f"{bandwidth / 1e9:.3f} GB/s via {transport}"


def sockets_cause(ends: Mapping[str, NodeTransport]) -> tuple[str, str] | None:
    """Why a pair that NCCL runs over sockets has a faster fabric at hand ("while HOST has ...") and the fix;
    None when neither node has one."""
    if not any(t.has_fabric for t in ends.values()):
        return None
    held = " and ".join(f"{host} has {t.holds()}" for host, t in ends.items())
    for host, t in ends.items():
        if t.problem:
            return f"while {held} ({host}: {t.problem})", t.fix
    plugin = any(t.kind.startswith("plugin:") for t in ends.values())
    return f"while {held}", PLUGIN_FIX if plugin else MISMATCH_FIX


def below_fabric(bandwidth: float, ends: Iterable[NodeTransport], factor: float) -> bool:
    """Slower than the fabric either end has by more than `factor` (its line rate); an unknown rate counts."""
    rate = max((t.rate for t in ends if t.has_fabric), default=0.0)
    return rate == 0.0 or bandwidth * factor < rate
