"""doctor's transport rows: the fabric seen in fake /sys trees, what the image can use of it, and the transport
that follows; a multi-node run that would use TCP sockets beside a fabric warns with the fix."""

from __future__ import annotations

from pathlib import Path

from tests.unit.doctor.conftest import context
from tests.unit.fake_nccl_plugin import build, needs_gcc
from zerokit.doctor.transport import Fabric, Port, check_transport, read_ports, transport_row

HDR = Port("mlx5_0", "1", "ACTIVE", "200 Gb/sec (4X HDR)", "InfiniBand", "mlx5_core")


def fake_sys(root: Path, ports: dict[str, tuple[str, str, str, str]] | None = None, cxi: tuple[str, ...] = ()) -> Path:
    """A /sys with /class/infiniband/DEV/ports/1/{state,rate,link_layer}, DEV's driver, and /class/cxi/NAME."""
    for device, (state, rate, layer, driver) in (ports or {}).items():
        port = root / "class" / "infiniband" / device / "ports" / "1"
        port.mkdir(parents=True)
        (port / "state").write_text(f"{state}\n")
        (port / "rate").write_text(f"{rate}\n")
        (port / "link_layer").write_text(f"{layer}\n")
        (root / "bus" / driver).mkdir(parents=True, exist_ok=True)
        (root / "class" / "infiniband" / device / "device").mkdir()
        (root / "class" / "infiniband" / device / "device" / "driver").symlink_to(root / "bus" / driver)
    for name in cxi:
        (root / "class" / "cxi" / name).mkdir(parents=True)
    return root


def rows(environ, sys_root: Path, verbs: int | None, multi_node: bool = True):
    return check_transport(context(environ, multi_node=multi_node), sys_root=sys_root, verbs=lambda: verbs)


def test_ports_are_read_with_state_rate_link_layer_and_driver(tmp_path: Path):
    root = fake_sys(tmp_path, {"mlx5_0": ("4: ACTIVE", "200 Gb/sec (4X HDR)", "InfiniBand", "mlx5_core"),
                               "mlx5_1": ("1: DOWN", "10 Gb/sec (4X SDR)", "Ethernet", "mlx5_core")})  # fmt: skip
    assert read_ports(root) == (
        HDR,
        Port("mlx5_1", "1", "DOWN", "10 Gb/sec (4X SDR)", "Ethernet", "mlx5_core"),
    )
    fabric, transport = rows({}, root, verbs=2)
    assert fabric.detail == (
        "mlx5_0:1 ACTIVE 200 Gb/sec (4X HDR) InfiniBand; mlx5_1:1 DOWN 10 Gb/sec (4X SDR) RoCE "
        "(libibverbs lists 2 device(s) in the image)"
    )
    assert transport.status == "ok"
    assert transport.detail == "IB verbs (NCCL's own) on mlx5_0:1 ACTIVE 200 Gb/sec (4X HDR) InfiniBand"


def test_no_fabric_is_tcp_sockets_and_fine(tmp_path: Path):
    fabric, transport = rows({}, tmp_path, verbs=None)
    assert fabric.detail == "no IB/RoCE, EFA or Slingshot device on this node"
    assert (transport.status, transport.detail) == ("ok", "TCP sockets (no fabric seen)")


def test_an_active_ib_port_without_libibverbs_in_the_image_warns_across_nodes(tmp_path: Path):
    root = fake_sys(tmp_path, {"mlx5_0": ("4: ACTIVE", "200 Gb/sec (4X HDR)", "InfiniBand", "mlx5_core")})
    _, transport = rows({}, root, verbs=None)
    assert transport.status == "warn"
    assert transport.detail == "TCP sockets: IB/RoCE ports are active but the image's libibverbs does not load"
    assert "libibverbs1 and ibverbs-providers" in transport.fix
    _, one_node = rows({}, root, verbs=None, multi_node=False)
    assert one_node.status == "ok" and one_node.detail.startswith("TCP sockets across nodes: IB/RoCE ports are active")
    _, no_provider = rows({}, root, verbs=0)
    assert no_provider.status == "warn" and "lists no device" in no_provider.detail


def test_slingshot_without_a_plugin_warns_naming_the_plugin(tmp_path: Path):
    _, transport = rows({}, fake_sys(tmp_path, cxi=("cxi0", "cxi1")), verbs=None)
    assert transport.status == "warn"
    assert transport.detail == "TCP sockets: Slingshot (cxi0, cxi1) needs the aws-ofi-nccl plugin, none is named"
    assert transport.fix.startswith("name the host's aws-ofi-nccl plugin: ZEROKIT_NCCL_PLUGIN=")


def test_efa_without_a_plugin_warns(tmp_path: Path):
    root = fake_sys(tmp_path, {"rdmap16s27": ("4: ACTIVE", "100 Gb/sec (4X EDR)", "Unspecified", "efa")})
    _, transport = rows({}, root, verbs=1)
    assert transport.status == "warn" and transport.detail.startswith("TCP sockets: EFA (rdmap16s27) needs the aws-ofi")


def test_nccl_ib_disable_is_named():
    fabric = Fabric(ports=(HDR,), verbs=1, ib_disabled=True)
    assert transport_row(fabric, True).detail == "TCP sockets: NCCL_IB_DISABLE=1 while IB/RoCE ports are active"


def test_a_plugin_named_by_a_suffix_is_taken_as_named(tmp_path: Path):
    _, transport = rows({"NCCL_NET_PLUGIN": "ofi"}, fake_sys(tmp_path, cxi=("cxi0",)), verbs=None)
    assert (transport.status, transport.detail) == ("ok", "net plugin ofi")


@needs_gcc
def test_a_real_plugin_is_named_when_it_loads_and_warns_when_it_does_not(tmp_path: Path):
    fake = build(tmp_path / "build")
    root = fake_sys(tmp_path / "sys", cxi=("cxi0",))
    loads = {"ZEROKIT_NCCL_PLUGIN": str(fake.plugin), "LD_LIBRARY_PATH": str(fake.fabric)}
    _, transport = rows(loads, root, verbs=None)
    assert (transport.status, transport.detail) == ("ok", f"net plugin {fake.plugin}")
    _, broken = rows({"ZEROKIT_NCCL_PLUGIN": str(fake.plugin)}, root, verbs=None)
    assert broken.status == "warn"
    assert broken.detail.startswith(f"TCP sockets: plugin {fake.plugin} does not load: needs libfakefabric.so.1")
