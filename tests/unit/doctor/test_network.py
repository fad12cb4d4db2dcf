"""Network: the interface NCCL/gloo would use, and a hostname that is not loopback across nodes."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.unit.doctor.conftest import REPO, context, failures, run_doctor, run_main
from zerokit.doctor.network import (
    check_hostname,
    check_interface,
    default_route_interface,
    parse_request,
)

needs_namespaces = pytest.mark.skipif(
    os.geteuid() != 0 or shutil.which("unshare") is None, reason="namespaces need root and unshare"
)


def test_missing_interface_fails_listing_those_that_exist(environ, capsys):
    code, rows = run_main(["--ifname", "nosuch0", "--strict"], environ, capsys)
    assert code == 1
    assert failures(rows) == ["network: --ifname"]
    (row,) = [r for r in rows if r["name"] == "network: --ifname"]
    assert row["detail"].startswith("no interface nosuch0 (interfaces here: ")
    assert "lo" in row["detail"]
    assert "`--ifname IF`" in row["fix"] and "NCCL_SOCKET_IFNAME" in row["fix"]


def test_lo_by_name_passes():
    (result,) = check_interface(context(ifname="lo"))
    assert (result.status, result.detail) == ("ok", "lo up")


def test_nccl_prefix_that_matches_nothing_fails_and_exclusions_are_not_judged():
    (prefix,) = check_interface(context({"NCCL_SOCKET_IFNAME": "nosuch"}))
    assert prefix.status == "fail" and prefix.detail.startswith("no interface starts with nosuch")
    (matched,) = check_interface(context({"NCCL_SOCKET_IFNAME": "l"}))
    assert (matched.status, matched.detail) == ("ok", "lo up")
    (excluded,) = check_interface(context({"NCCL_SOCKET_IFNAME": "^docker,lo"}))
    assert excluded.status == "skip"


def test_every_named_setting_gets_a_row():
    results = check_interface(context({"NCCL_SOCKET_IFNAME": "=lo", "GLOO_SOCKET_IFNAME": "nosuch1"}, ifname="lo"))
    assert [(r.name, r.status) for r in results] == [
        ("network: --ifname", "ok"),
        ("network: NCCL_SOCKET_IFNAME", "ok"),
        ("network: GLOO_SOCKET_IFNAME", "fail"),
    ]


def test_request_parsing():
    assert parse_request("NCCL_SOCKET_IFNAME", "^docker,lo").mode == "exclude"
    assert parse_request("NCCL_SOCKET_IFNAME", "=eth0").names == ("eth0",)
    assert parse_request("NCCL_SOCKET_IFNAME", "ib,eth").mode == "prefix"
    assert parse_request("GLOO_SOCKET_IFNAME", "eth0,eth1").names == ("eth0", "eth1")


@needs_namespaces
def test_an_interface_that_is_down_fails():
    """A fresh network namespace, whose lo exists but is down; sysfs remounted to show that namespace."""
    code = (
        "import json; from zerokit.doctor.network import check_interface; from zerokit.doctor import Context; "
        "from zerokit.image.stack import load_stack; "
        "print(json.dumps([r.as_dict() for r in check_interface(Context(load_stack('cpu'), ifname='lo'))]))"
    )
    setup = 'mount -t sysfs sysfs /sys && exec "$@"'
    result = subprocess.run(
        ["unshare", "--net", "--mount", "sh", "-c", setup, "sh", sys.executable, "-c", code],
        capture_output=True,
        text=True,
        env={"PYTHONPATH": str(REPO / "src")},
    )
    (row,) = json.loads(result.stdout)
    assert row["status"] == "fail" and row["detail"].startswith("lo is down")


def test_route_to_master_addr():
    (result,) = check_interface(context({"MASTER_ADDR": "10.9.8.7"}), route=lambda address: "lo")
    assert (result.name, result.status) == ("network: route to MASTER_ADDR=10.9.8.7", "ok")


def test_an_unresolvable_master_addr_warns_on_one_node_and_fails_across_nodes():
    (single,) = check_interface(context({"MASTER_ADDR": "no-such-host.invalid"}))
    assert single.status == "warn" and "cannot resolve the main address 'no-such-host.invalid'" in single.detail
    (multi,) = check_interface(context({"MASTER_ADDR": "no-such-host.invalid"}, multi_node=True))
    assert multi.status == "fail" and "--ifname" in multi.fix


def test_loopback_interface_fails_across_nodes():
    (result,) = check_interface(context({"MASTER_ADDR": "127.0.0.1"}, multi_node=True))
    assert result.status == "fail" and result.detail == "lo cannot reach other nodes"
    (result,) = check_interface(context({"MASTER_ADDR": "127.0.0.1"}))
    assert result.status == "ok"


def test_across_nodes_without_master_addr_the_default_route_decides(tmp_path: Path):
    """The /proc/net/route format (this machine's, as text) gives the default route's interface."""
    route = tmp_path / "route"
    route.write_text(
        "Iface\tDestination\tGateway \tFlags\tRefCnt\tUse\tMetric\tMask\t\tMTU\tWindow\tIRTT\n"
        "docker0\t000011AC\t00000000\t0001\t0\t0\t0\t0000FFFF\t0\t0\t0\n"
        "eth0\t00000000\t010200C0\t0003\t0\t0\t0\t00000000\t0\t0\t0\n"
    )
    assert default_route_interface(route) == "eth0"
    (result,) = check_interface(context(multi_node=True))
    assert result.name == "network: default route (no MASTER_ADDR)"


def test_hostname_on_loopback_fails_across_nodes_and_warns_on_one():
    loopback = {"hostname": lambda: "node1", "resolve": lambda host: ["127.0.1.1"]}
    (multi,) = check_hostname(context(multi_node=True), **loopback)
    assert multi.status == "fail" and multi.detail.startswith("node1 resolves to loopback 127.0.1.1")
    assert "/etc/hosts" in multi.fix and "--ifname" in multi.fix
    (single,) = check_hostname(context(), **loopback)
    assert single.status == "warn"
    (pinned,) = check_hostname(context({"GLOO_SOCKET_IFNAME": "eth0"}, multi_node=True), **loopback)
    assert pinned.status == "ok"
    (routable,) = check_hostname(context(multi_node=True), hostname=lambda: "node1", resolve=lambda h: ["10.0.0.5"])
    assert routable.status == "ok"


@needs_namespaces
def test_multi_node_doctor_with_a_loopback_hostname_exits_1(tmp_path: Path, environ):
    """For real: a private UTS and mount namespace, hostname zknode1, an /etc/hosts mapping it to 127.0.1.1."""
    hosts = tmp_path / "hosts"
    hosts.write_text("127.0.0.1 localhost\n127.0.1.1 zknode1\n")
    setup = f'hostname zknode1 && mount --bind {hosts} /etc/hosts && exec "$@"'
    wrapper = ["unshare", "--uts", "--mount", "sh", "-c", setup, "sh"]
    args = ["--multi-node", "--strict", "--json", "--skip", "launchers", "--skip", "interface"]
    result = run_doctor(args, environ, prefix=wrapper)
    rows = json.loads(result.stdout)
    assert failures(rows) == ["network: hostname"], result.stderr
    assert result.returncode == 1
    (row,) = [r for r in rows if r["name"] == "network: hostname"]
    assert row["detail"] == "zknode1 resolves to loopback 127.0.1.1: other nodes cannot reach this one"
