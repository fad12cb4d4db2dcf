"""launch's --nccl-plugin and --nccl-net-strict: the ranks' variables, what a head node passes on, and the check
before any rank starts, with a real plugin compiled here."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.conftest import run_zerokit
from tests.unit.fake_nccl_plugin import build, needs_gcc
from zerokit.foundations.errors import UserError
from zerokit.image.plugin_binds import DEPS_MOUNT, PLUGIN_MOUNT
from zerokit.launch.config import parse
from zerokit.launch.nccl_plugin import NcclPlugin, check_nccl_plugin, plugin_env
from zerokit.launch.plan import plan

PY = "/venv/bin/python"


@pytest.fixture(scope="module")
def fake(tmp_path_factory):
    """Built once, for the tests marked needs_gcc."""
    return build(tmp_path_factory.mktemp("plugin"))


def make_plan(argv: list[str], environ: dict[str, str]):
    return plan(parse(argv, environ, PY), None, environ, 8, lambda address: "ib0", lambda: 41000)


def test_the_bound_plugin_gives_the_ranks_its_path_and_its_libraries_first():
    env = plugin_env(NcclPlugin(f"{PLUGIN_MOUNT}/libnccl-net-ofi.so"), {"LD_LIBRARY_PATH": "/usr/local/lib"})
    assert env == {
        "NCCL_NET_PLUGIN": f"{PLUGIN_MOUNT}/libnccl-net-ofi.so",
        "LD_LIBRARY_PATH": f"{PLUGIN_MOUNT}:{DEPS_MOUNT}:/usr/local/lib",
    }
    assert plugin_env(NcclPlugin("/opt/ofi/lib/libnccl-net.so", "AWS Libfabric"), {})["NCCL_NET"] == "AWS Libfabric"
    assert plugin_env(None, {}) == {}


@needs_gcc
def test_the_flag_or_its_variable_names_the_plugin_for_every_rank(fake):
    for argv, environ in (
        (["--nccl-plugin", str(fake.plugin.parent)], {}),
        ([], {"ZEROKIT_NCCL_PLUGIN": str(fake.plugin)}),
    ):
        p = make_plan([*argv, "--nproc-per-node", "2", "train"], environ)
        assert all(c.env["NCCL_NET_PLUGIN"] == str(fake.plugin) for c in p.commands)
        assert all(c.env["LD_LIBRARY_PATH"] == str(fake.plugin.parent) for c in p.commands)
        assert "NCCL_NET" not in p.env
    assert "NCCL_NET_PLUGIN" not in make_plan(["train"], {}).env


@needs_gcc
def test_strict_pins_nccl_to_the_plugins_own_name(fake):
    p = make_plan(["--nccl-plugin", str(fake.plugin), "--nccl-net-strict", "train"], {})
    assert p.env["NCCL_NET"] == "FakeFabric"
    with pytest.raises(UserError, match=r"^--nccl-net-strict pins NCCL to a plugin's network: name it with"):
        make_plan(["--nccl-net-strict", "train"], {})
    with pytest.raises(UserError, match="names no network"):
        make_plan(["--nccl-plugin", str(fake.not_a_plugin), "--nccl-net-strict", "train"], {})


def test_a_folder_without_a_plugin_is_refused_naming_the_flag(tmp_path: Path):
    with pytest.raises(UserError, match=rf"^--nccl-plugin={tmp_path}: a folder must hold one NCCL net plugin"):
        make_plan(["--nccl-plugin", str(tmp_path), "train"], {})


@needs_gcc
def test_a_head_node_passes_the_plugin_on_to_the_nodes(fake, tmp_path: Path):
    hostfile = tmp_path / "hosts"
    hostfile.write_text("node1\nnode2\n")
    argv = ["--launcher", "pdsh", "--hostfile", str(hostfile), "--nccl-plugin", str(fake.plugin), "--nccl-net-strict"]
    p = make_plan([*argv, "train"], {})
    assert p.env["ZEROKIT_NCCL_PLUGIN"] == str(fake.plugin) and p.env["ZEROKIT_NCCL_NET_STRICT"] == "1"


@needs_gcc
def test_the_check_passes_with_the_ranks_library_path_and_refuses_without_in_one_line(fake):
    plugin = NcclPlugin(str(fake.plugin))
    check_nccl_plugin(plugin, {"LD_LIBRARY_PATH": f"{fake.plugin.parent}:{fake.fabric}"})
    with pytest.raises(UserError) as refusal:
        check_nccl_plugin(plugin, {"LD_LIBRARY_PATH": str(fake.plugin.parent)})
    message = str(refusal.value)
    assert message.startswith(f"NCCL net plugin {fake.plugin} needs libfakefabric.so.1, which is not found")
    assert "\n" not in message
    with pytest.raises(UserError, match="exports no ncclNetPlugin_vN symbol"):
        check_nccl_plugin(NcclPlugin(str(fake.not_a_plugin)), {"LD_LIBRARY_PATH": str(fake.fabric)})


@needs_gcc
def test_launch_refuses_a_broken_plugin_before_any_rank_starts(fake, tmp_path: Path, zk_env):
    marker = tmp_path / "ran"
    argv = ["launch", "--nccl-plugin", str(fake.plugin), "--nproc-per-node", "1", "--", "touch", str(marker)]
    refused = run_zerokit(argv, {**zk_env, "LD_LIBRARY_PATH": ""}, timeout=60)
    assert refused.returncode == 2, refused.stderr
    (line,) = refused.stderr.splitlines()
    assert line.startswith(f"error: NCCL net plugin {fake.plugin} needs libfakefabric.so.1, which is not found")
    assert not marker.exists()
