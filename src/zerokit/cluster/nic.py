"""Which network interface carries the job's traffic: the one that routes to the main address.

NCCL and gloo otherwise pick an interface themselves, and on cluster nodes they often pick the
wrong one (a management NIC, docker0, or loopback when the hostname resolves to 127.0.1.1).
"""

from __future__ import annotations

import re
import socket
import subprocess
from collections.abc import Callable

from zerokit.foundations.errors import UserError

# `ip route get ADDR` -> "... dev eth0 src ..."; a local address routes via "dev lo".
_DEV = re.compile(r"\bdev\s+(\S+)")


def parse_route_device(route: str) -> str | None:
    match = _DEV.search(route)
    return match[1] if match else None


def parse_address_owner(addr_show: str, address: str) -> str | None:
    """The interface holding `address`, from `ip -o addr show` output ("2: eth0    inet 10.0.0.2/24 ...")."""
    for line in addr_show.splitlines():
        fields = line.split()
        if len(fields) >= 4 and fields[2] in ("inet", "inet6") and fields[3].split("/")[0] == address:
            return fields[1].split("@")[0]
    return None


def _ip(*args: str) -> str:
    try:
        return subprocess.run(["ip", *args], capture_output=True, text=True, timeout=10, check=True).stdout
    except (OSError, subprocess.SubprocessError) as error:
        raise UserError(f"cannot run `ip {' '.join(args)}` ({error}): pass --ifname NAME") from None


def interface_to(address: str, ip: Callable[..., str] = _ip) -> str:
    """The interface this host uses to reach `address` (a host name or an IP).

    When `address` is this host's own, the route goes via loopback, but the other nodes reach it on
    the interface that holds the address: that one is returned, not `lo`.
    """
    try:
        resolved = socket.gethostbyname(address)
    except OSError:
        raise UserError(
            f"cannot resolve the main address {address!r}: fix the host list or pass --master-addr IP"
        ) from None
    device = parse_route_device(ip("route", "get", resolved))
    if device == "lo" and not resolved.startswith("127."):
        device = parse_address_owner(ip("-o", "addr", "show"), resolved) or device
    if device is None:
        raise UserError(f"no route to the main address {address} ({resolved}): pass --ifname NAME")
    return device


def nic_env(ifname: str) -> dict[str, str]:
    return {"NCCL_SOCKET_IFNAME": ifname, "GLOO_SOCKET_IFNAME": ifname}
