"""Network: the interface NCCL/gloo would use exists and is up; the hostname is not a loopback name across nodes."""

from __future__ import annotations

import ipaddress
import socket
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from zerokit.cluster.nic import interface_to
from zerokit.doctor.context import Context
from zerokit.doctor.result import CheckResult, fail, ok, skip, warn
from zerokit.foundations.errors import UserError

SYS_CLASS_NET = Path("/sys/class/net")
PROC_ROUTE = Path("/proc/net/route")
IFF_UP = 0x1
IFNAME_FIX = "pass an interface that exists and is up: `--ifname IF` (or NCCL_SOCKET_IFNAME / GLOO_SOCKET_IFNAME)"


@dataclass(frozen=True)
class Request:
    """Which interfaces a setting names: exact names, NCCL's name prefixes, or NCCL's exclusions (^)."""

    source: str
    names: tuple[str, ...]
    mode: str  # "exact", "prefix" or "exclude"


def parse_request(source: str, value: str) -> Request:
    """`--ifname` and GLOO_SOCKET_IFNAME name interfaces; NCCL_SOCKET_IFNAME gives prefixes, `=` exact, `^` excluded."""
    mode = "exact"
    if source == "NCCL_SOCKET_IFNAME":
        mode = {"^": "exclude", "=": "exact"}.get(value[:1], "prefix")
        value = value.lstrip("^=")
    return Request(source, tuple(name for name in value.split(",") if name), mode)


def requests(ctx: Context) -> list[Request]:
    found = [parse_request("--ifname", ctx.ifname)] if ctx.ifname else []
    for variable in ("NCCL_SOCKET_IFNAME", "GLOO_SOCKET_IFNAME"):
        if ctx.environ.get(variable):
            found.append(parse_request(variable, ctx.environ[variable]))
    return found


def is_up(name: str, net: Path = SYS_CLASS_NET) -> bool:
    """operstate "up"; "unknown" (lo, tun and some virtual devices) counts when the IFF_UP flag is set."""
    state = (net / name / "operstate").read_text().strip()
    if state == "up":
        return True
    return state == "unknown" and int((net / name / "flags").read_text(), 16) & IFF_UP != 0


def check_interface(
    ctx: Context, *, net: Path = SYS_CLASS_NET, route: Callable[[str], str] = interface_to
) -> list[CheckResult]:
    """The interfaces named by --ifname or the NCCL/gloo variables; else the one `launch` would pick (the route
    to MASTER_ADDR, via zerokit.cluster.nic)."""
    present = sorted(p.name for p in net.iterdir()) if net.is_dir() else []
    named = requests(ctx)
    if named:
        return [judge_request(request, present, ctx.multi_node, net) for request in named]
    address = ctx.environ.get("MASTER_ADDR")
    if address:
        source = f"route to MASTER_ADDR={address}"
        try:
            interface = route(address)
        except UserError as error:
            verdict = fail if ctx.multi_node else warn
            return [verdict(f"network: {source}", str(error), IFNAME_FIX)]
    elif ctx.multi_node:
        source, interface = "default route (no MASTER_ADDR)", default_route_interface()
        if interface is None:
            return [fail(f"network: {source}", "no default route to pick an interface by", IFNAME_FIX)]
    else:
        source, interface = "single node", "lo"
    return [judge_request(Request(source, (interface,), "exact"), present, ctx.multi_node, net)]


def judge_request(request: Request, present: Sequence[str], multi_node: bool, net: Path) -> CheckResult:
    name = f"network: {request.source}"
    here = ", ".join(present) or "none"
    if request.mode == "exclude":
        return skip(name, f"excludes {', '.join(request.names)}; NCCL picks among the rest ({here})")
    if request.mode == "prefix":
        chosen = [i for i in present if i.startswith(request.names)]
        if not chosen:
            return fail(
                name, f"no interface starts with {' or '.join(request.names)} (interfaces here: {here})", IFNAME_FIX
            )
    else:
        missing = [i for i in request.names if i not in present]
        if missing:
            return fail(name, f"no interface {', '.join(missing)} (interfaces here: {here})", IFNAME_FIX)
        chosen = list(request.names)
    down = [i for i in chosen if not is_up(i, net)]
    if down and (request.mode == "exact" or len(down) == len(chosen)):
        return fail(name, f"{', '.join(down)} is down (interfaces here: {here})", IFNAME_FIX)
    up = [i for i in chosen if i not in down]
    if multi_node and all(i == "lo" for i in up):
        return fail(name, "lo cannot reach other nodes", IFNAME_FIX)
    return ok(name, f"{', '.join(up)} up")


def routes(proc_route: Path = PROC_ROUTE) -> list[tuple[str, int, int]]:
    """(interface, destination, mask) of the IPv4 main routing table, as integers in host order."""
    rows = []
    for line in proc_route.read_text().splitlines()[1:]:
        fields = line.split()
        if len(fields) >= 8:
            destination = int.from_bytes(bytes.fromhex(fields[1]), "little")
            mask = int.from_bytes(bytes.fromhex(fields[7]), "little")
            rows.append((fields[0], destination, mask))
    return rows


def default_route_interface(proc_route: Path = PROC_ROUTE) -> str | None:
    defaults = [interface for interface, destination, mask in routes(proc_route) if destination == 0 and mask == 0]
    return defaults[0] if defaults else None


def addresses_of(host: str) -> list[str]:
    return sorted({info[4][0] for info in socket.getaddrinfo(host, None)})


def check_hostname(
    ctx: Context,
    *,
    hostname: Callable[[], str] = socket.gethostname,
    resolve: Callable[[str], list[str]] = addresses_of,
) -> list[CheckResult]:
    """gloo and torch's rendezvous resolve the hostname; 127.0.1.1 (Debian's /etc/hosts) is unreachable elsewhere."""
    name = "network: hostname"
    host = hostname()
    fix = (
        f"map {host} to the node's own address in /etc/hosts (not 127.0.x.1), or pin the interface: "
        "`--ifname IF` / GLOO_SOCKET_IFNAME=IF"
    )
    pinned = ctx.ifname or ctx.environ.get("GLOO_SOCKET_IFNAME")
    try:
        addresses = resolve(host)
    except OSError as error:
        addresses, problem = [], f"{host} does not resolve ({error})"
    else:
        loopback = [a for a in addresses if ipaddress.ip_address(a.split("%")[0]).is_loopback]
        problem = f"{host} resolves to loopback {', '.join(loopback)}" if loopback else ""
    if not problem:
        return [ok(name, f"{host} -> {', '.join(addresses)}")]
    if pinned:
        return [ok(name, f"{problem}; not used: gloo binds to interface {pinned}")]
    if ctx.multi_node:
        return [fail(name, f"{problem}: other nodes cannot reach this one", fix)]
    return [warn(name, f"{problem}: fine on one node, fails across nodes", fix)]
