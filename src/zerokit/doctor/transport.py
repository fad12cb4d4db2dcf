"""Network: what NCCL will carry traffic between nodes over, on this node, from this image.

NCCL takes a net plugin when one loads (NCCL_NET_PLUGIN, else libnccl-net.so), else its own IB verbs transport
when libibverbs and a provider for the device load and a port is active, else TCP sockets, without a word. The
rows name the fabric this node has (/sys/class/infiniband ports: state, rate, link layer; Slingshot's
/sys/class/cxi; EFA's devices by their driver), what the image can use of it, and the transport that follows;
a multi-node run that would use sockets while a fabric is there is a warning naming the fix.
"""

from __future__ import annotations

import ctypes
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

from zerokit.doctor.context import Context
from zerokit.doctor.result import CheckResult, ok, warn
from zerokit.image.nccl_net import nccl_version, plugin_problem
from zerokit.image.plugin_binds import VARIABLE, plugin_file

SYS = Path("/sys")
PLUGIN_FIX = (
    "name the host's aws-ofi-nccl plugin: ZEROKIT_NCCL_PLUGIN=/path/to/aws-ofi-nccl/lib on the host (the job "
    "scripts bind it in) or `launch --nccl-plugin PATH`; docs/network.md"
)
VERBS_FIX = (
    "use an image whose stack lists libibverbs1 and ibverbs-providers in [apt] runtime (zerokit's do), and give "
    "the container /dev/infiniband (Docker: --device /dev/infiniband; Apptainer binds /dev)"
)


@dataclass(frozen=True)
class Port:
    device: str
    port: str
    state: str  # ACTIVE, DOWN, INIT ...
    rate: str  # "200 Gb/sec (4X HDR)"
    link_layer: str  # InfiniBand, Ethernet (RoCE)
    driver: str  # mlx5_core, efa ...

    def describe(self) -> str:
        layer = "RoCE" if self.link_layer == "Ethernet" else self.link_layer
        return f"{self.device}:{self.port} {self.state} {self.rate} {layer}"


@dataclass(frozen=True)
class Fabric:
    """What this node has and what the image can use of it."""

    ports: tuple[Port, ...] = ()
    cxi: tuple[str, ...] = ()  # Slingshot NICs
    verbs: int | None = None  # devices libibverbs lists from the image; None: it does not load
    plugin: str = ""  # ZEROKIT_NCCL_PLUGIN or NCCL_NET_PLUGIN, as given
    plugin_problem: str | None = None  # why NCCL could not load it
    ib_disabled: bool = False  # NCCL_IB_DISABLE=1

    @property
    def active(self) -> tuple[Port, ...]:
        return tuple(p for p in self.ports if p.state == "ACTIVE")

    @property
    def efa(self) -> tuple[Port, ...]:
        return tuple(p for p in self.ports if p.driver == "efa")


def read_text(path: Path) -> str:
    try:
        return path.read_text().strip()
    except OSError:
        return ""


def read_ports(sys_root: Path = SYS) -> tuple[Port, ...]:
    """The RDMA ports under sys_root/class/infiniband: state "4: ACTIVE" read as ACTIVE."""
    found = []
    for device in sorted((sys_root / "class" / "infiniband").glob("*")):
        driver = (device / "device" / "driver").resolve().name if (device / "device" / "driver").exists() else ""
        for port in sorted((device / "ports").glob("*")):
            state = read_text(port / "state").partition(":")[2].strip() or read_text(port / "state")
            found.append(
                Port(device.name, port.name, state, read_text(port / "rate"), read_text(port / "link_layer"), driver)
            )
    return tuple(found)


def verbs_devices() -> int | None:
    """How many devices the image's libibverbs lists (each needs its provider); None when it does not load."""
    try:
        verbs = ctypes.CDLL("libibverbs.so.1")
    except OSError:
        return None
    verbs.ibv_get_device_list.restype = ctypes.POINTER(ctypes.c_void_p)
    count = ctypes.c_int(0)
    devices = verbs.ibv_get_device_list(ctypes.byref(count))
    if devices:
        verbs.ibv_free_device_list(devices)
    return count.value


def named_plugin(environ: Mapping[str, str]) -> str:
    return environ.get(VARIABLE) or environ.get("NCCL_NET_PLUGIN", "")


def judge_plugin(plugin: str, environ: Mapping[str, str]) -> str | None:
    """Why NCCL could not load the plugin named; a name that is no path (NCCL_NET_PLUGIN=ofi: NCCL looks for
    libnccl-net-ofi.so on the library path) is not judged."""
    if "/" not in plugin:
        return None
    try:
        path = str(plugin_file(plugin))
    except ValueError as error:
        return str(error)
    return plugin_problem(path, environ, nccl_version())


def gather(environ: Mapping[str, str], sys_root: Path = SYS, verbs: Callable[[], int | None] = verbs_devices) -> Fabric:
    plugin = named_plugin(environ)
    return Fabric(
        ports=read_ports(sys_root),
        cxi=tuple(sorted(p.name for p in (sys_root / "class" / "cxi").glob("*"))),
        verbs=verbs(),
        plugin=plugin,
        plugin_problem=judge_plugin(plugin, environ) if plugin else None,
        ib_disabled=environ.get("NCCL_IB_DISABLE", "").strip() == "1",
    )


def fabric_text(fabric: Fabric) -> str:
    """Every port and Slingshot NIC this node has ("" when none)."""
    return "; ".join([p.describe() for p in fabric.ports] + [f"{name} Slingshot" for name in fabric.cxi])


def fabric_row(fabric: Fabric) -> CheckResult:
    seen = fabric_text(fabric)
    if not seen:
        return ok("network: fabric", "no IB/RoCE, EFA or Slingshot device on this node")
    verbs = "libibverbs does not load" if fabric.verbs is None else f"libibverbs lists {fabric.verbs} device(s)"
    return ok("network: fabric", f"{seen} ({verbs} in the image)")


@dataclass(frozen=True)
class Choice:
    """The transport NCCL takes across nodes from this node; when that is sockets beside a fabric, why and the fix."""

    kind: str  # "ib", "roce", "plugin:<as named>" or "sockets"
    detail: str  # doctor's words for it: "IB verbs (NCCL's own) on ...", "TCP sockets: <problem>" ...
    problem: str = ""  # why sockets, while a fabric is there
    fix: str = ""


def nccl_choice(fabric: Fabric) -> Choice:
    """NCCL's order: a named plugin, else its own IB verbs on an active port the image can open, else sockets."""
    if fabric.plugin:
        if fabric.plugin_problem:
            return sockets(f"plugin {fabric.plugin} does not load: {fabric.plugin_problem}", PLUGIN_FIX)
        return Choice(f"plugin:{fabric.plugin}", f"net plugin {fabric.plugin}")
    if fabric.cxi:
        return sockets(f"Slingshot ({', '.join(fabric.cxi)}) needs the aws-ofi-nccl plugin, none is named", PLUGIN_FIX)
    if fabric.efa:
        return sockets(f"EFA ({fabric.efa[0].device}) needs the aws-ofi-nccl plugin, none is named", PLUGIN_FIX)
    if fabric.active and fabric.ib_disabled:
        return sockets("NCCL_IB_DISABLE=1 while IB/RoCE ports are active", "unset NCCL_IB_DISABLE")
    if fabric.active and fabric.verbs is None:
        return sockets("IB/RoCE ports are active but the image's libibverbs does not load", VERBS_FIX)
    if fabric.active and fabric.verbs == 0:
        no_device = "IB/RoCE ports are active but libibverbs lists no device (no provider, or no /dev/infiniband)"
        return sockets(no_device, VERBS_FIX)
    if fabric.active:
        layer = "ib" if any(p.link_layer == "InfiniBand" for p in fabric.active) else "roce"
        return Choice(layer, f"IB verbs (NCCL's own) on {', '.join(p.describe() for p in fabric.active)}")
    return Choice("sockets", "TCP sockets (no fabric seen)")


def sockets(problem: str, fix: str) -> Choice:
    return Choice("sockets", f"TCP sockets: {problem}", problem, fix)


def transport_row(fabric: Fabric, multi_node: bool) -> CheckResult:
    """The transport NCCL will use across nodes, and a warning when that is sockets beside a fabric."""
    name = "network: NCCL transport"
    choice = nccl_choice(fabric)
    if not choice.problem:
        return ok(name, choice.detail)
    if multi_node or fabric.plugin:  # a named plugin that does not load is worth a warning on one node too
        return warn(name, choice.detail, choice.fix)
    return ok(name, f"TCP sockets across nodes: {choice.problem} (one node: NVLink/shared memory)")


def check_transport(
    ctx: Context, *, sys_root: Path = SYS, verbs: Callable[[], int | None] = verbs_devices
) -> list[CheckResult]:
    fabric = gather(ctx.environ, sys_root, verbs)
    return [fabric_row(fabric), transport_row(fabric, ctx.multi_node)]
