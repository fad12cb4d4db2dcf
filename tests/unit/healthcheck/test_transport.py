"""The transport per node pair: each node's side read from fake /sys trees (as doctor reads them), what a pair
shares, the report's pair line, and the verdict naming sockets beside a fabric as a slow pair's cause."""

from __future__ import annotations

from dataclasses import asdict
from pathlib import Path

import pytest

from tests.unit.doctor.test_transport import fake_sys
from zerokit.doctor.transport import PLUGIN_FIX, VERBS_FIX
from zerokit.healthcheck import report
from zerokit.healthcheck.links import Link
from zerokit.healthcheck.transport import MISMATCH_FIX, NodeTransport, node_transport, pair_transport
from zerokit.healthcheck.verdict import transport_findings

GB = 1e9
HDR = ("4: ACTIVE", "200 Gb/sec (4X HDR)", "InfiniBand", "mlx5_core")
ROCE = ("4: ACTIVE", "100 Gb/sec (4X EDR)", "Ethernet", "mlx5_core")
DOWN = ("1: DOWN", "200 Gb/sec (4X HDR)", "InfiniBand", "mlx5_core")
ETH0 = {"NCCL_SOCKET_IFNAME": "eth0"}


def side(root: Path, ports: dict | None = None, environ: dict | None = None, verbs: int | None = 1) -> NodeTransport:
    """A node's transport from a fake /sys with PORTS (each DEV's port 1)."""
    return node_transport({**ETH0, **(environ or {})}, fake_sys(root, ports), lambda: verbs)


def test_a_node_with_an_active_ib_port_takes_ib_verbs_at_its_rate(tmp_path: Path):
    node = side(tmp_path, {"mlx5_0": HDR, "mlx5_1": DOWN})
    assert (node.kind, node.detail, node.interface, node.has_fabric) == (
        "ib",
        "mlx5_0:1 200 Gb/sec (4X HDR)",
        "eth0",
        True,
    )
    assert node.rate == pytest.approx(25 * GB)
    assert node.fabric.startswith("mlx5_0:1 ACTIVE 200 Gb/sec (4X HDR) InfiniBand; mlx5_1:1 DOWN")
    assert side(tmp_path / "roce", {"mlx5_0": ROCE}).kind == "roce"


def test_a_node_without_a_fabric_or_unable_to_use_it_takes_sockets(tmp_path: Path):
    bare = side(tmp_path / "bare")
    assert (bare.kind, bare.fabric, bare.has_fabric, bare.problem) == ("sockets", "", False, "")
    no_verbs = side(tmp_path / "ib", {"mlx5_0": HDR}, verbs=None)
    assert (no_verbs.kind, no_verbs.has_fabric, no_verbs.fix) == ("sockets", True, VERBS_FIX)
    assert no_verbs.problem == "IB/RoCE ports are active but the image's libibverbs does not load"
    only_down = side(tmp_path / "down", {"mlx5_0": DOWN})
    assert (only_down.kind, only_down.has_fabric) == ("sockets", False)
    plugin = side(tmp_path / "cxi", environ={"NCCL_NET_PLUGIN": "ofi"})
    assert (plugin.kind, plugin.detail) == ("plugin:ofi", "ofi")


def test_a_pair_takes_ib_only_when_both_ends_have_an_active_port_of_one_link_layer(tmp_path: Path):
    ib_a, ib_b = side(tmp_path / "a", {"mlx5_0": HDR}), side(tmp_path / "b", {"mlx5_0": HDR})
    roce, bare = side(tmp_path / "c", {"mlx5_0": ROCE}), side(tmp_path / "d")
    assert pair_transport(ib_a, ib_b, "nccl").text == "IB verbs (mlx5_0:1 200 Gb/sec (4X HDR))"
    assert pair_transport(roce, roce, "nccl").text == "RoCE (mlx5_0:1 100 Gb/sec (4X EDR))"
    assert pair_transport(ib_a, roce, "nccl").text == "TCP sockets (eth0)"
    assert pair_transport(ib_a, bare, "nccl").kind == "sockets"


def test_a_pair_takes_a_plugin_only_when_both_load_it_and_gloo_is_tcp_whatever_they_have():
    ofi = NodeTransport("plugin:ofi", "ofi", "hsn0")
    assert pair_transport(ofi, ofi, "nccl").text == "net plugin ofi"
    assert pair_transport(ofi, NodeTransport("sockets", "", "eth0"), "nccl").text == "TCP sockets (hsn0 / eth0)"
    ib = NodeTransport("ib", "mlx5_0:1 200 Gb/sec (4X HDR)", "eth0")
    assert (pair_transport(ib, ib, "gloo").kind, pair_transport(ib, ib, "gloo").text) == (
        "gloo",
        "gloo over TCP (eth0)",
    )


def facts_of(**transports: NodeTransport) -> dict[str, dict]:
    return {host: {"host": host, "transport": asdict(t)} for host, t in transports.items()}


def test_a_slow_pair_over_sockets_beside_a_fabric_is_named_with_its_cause(tmp_path: Path):
    facts = facts_of(n1=side(tmp_path / "a", {"mlx5_0": HDR}), n2=side(tmp_path / "b", {"mlx5_0": DOWN}))
    slow = Link("n1", "n2", 50e-6, 0.9 * GB, 1.2 * GB)
    (found,) = transport_findings([slow], facts, "nccl", factor=4)
    assert found.host == "n1 <-> n2"
    assert found.problem == (
        "0.900 GB/s via TCP sockets (eth0) while n1 has mlx5_0:1 ACTIVE 200 Gb/sec (4X HDR) InfiniBand "
        "and n2 has mlx5_0:1 DOWN 200 Gb/sec (4X HDR) InfiniBand"
    )
    assert found.fix == MISMATCH_FIX and "NCCL_IB_HCA" in found.fix
    fast = Link("n1", "n2", 50e-6, 10 * GB, 10 * GB)  # IPoIB-fast sockets: within the factor of the fabric's rate
    assert transport_findings([fast], facts, "nccl", factor=4) == []
    assert transport_findings([slow], facts, "gloo", factor=4) == []


def test_a_node_that_cannot_use_its_fabric_is_the_cause_with_doctors_fix(tmp_path: Path):
    facts = facts_of(n1=side(tmp_path / "a", {"mlx5_0": HDR}, verbs=None), n2=side(tmp_path / "b", {"mlx5_0": HDR}))
    (found,) = transport_findings([Link("n1", "n2", 50e-6, 0.9 * GB, 0.9 * GB)], facts, "nccl", factor=4)
    assert found.problem.endswith("(n1: IB/RoCE ports are active but the image's libibverbs does not load)")
    assert found.fix == VERBS_FIX
    plugin = facts_of(n1=NodeTransport("plugin:ofi", "ofi", "hsn0", "cxi0 Slingshot", True), n2=NodeTransport(
        "sockets", "", "hsn0", "cxi0 Slingshot", True))  # fmt: skip
    (named,) = transport_findings([Link("n1", "n2", 50e-6, 0.9 * GB, 0.9 * GB)], plugin, "nccl", factor=4)
    assert "n1 has cxi0 Slingshot, net plugin ofi and n2 has cxi0 Slingshot" in named.problem
    assert named.fix == PLUGIN_FIX  # the rate of a Slingshot NIC is not read: a pair over sockets beside it counts


def test_pairs_without_a_fabric_are_not_blamed_on_their_transport(tmp_path: Path):
    facts = facts_of(n1=side(tmp_path / "a"), n2=side(tmp_path / "b"))
    assert transport_findings([Link("n1", "n2", 50e-6, 0.01 * GB, 0.01 * GB)], facts, "nccl", factor=4) == []


def test_the_report_has_one_line_per_pair_and_the_json_its_transport(tmp_path: Path):
    facts = facts_of(n1=side(tmp_path / "a", {"mlx5_0": HDR}), n2=side(tmp_path / "b"))
    link = Link("n1", "n2", 57e-6, 0.9 * GB, 1.2 * GB)
    row = report.link_row(link, facts, "nccl")
    assert (row["transport"], row["transport_kind"], row["gbps"]) == ("TCP sockets (eth0)", "sockets", 0.9)
    assert report.link_line(row) == (
        "n1 <-> n2: 0.900 GB/s via TCP sockets (eth0); latency 57 us; each way 0.900 / 1.200 GB/s"
    )
    assert report.link_line(report.link_row(link, facts, "gloo")).startswith("n1 <-> n2: 0.900 GB/s via gloo over TCP")
