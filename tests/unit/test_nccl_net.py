"""NCCL's net plugin judged in the image: `ldd -r`'s words, the versions NCCL takes, and real shared objects
compiled here (a plugin needing a fake fabric library, present, absent, or older than it was built against;
one needing a newer glibc than any)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.unit.fake_nccl_plugin import NEWER_GLIBC_VERSION, build, needs_gcc
from zerokit.image.elf_symbols import dynamic_symbols
from zerokit.image.nccl_net import (
    accepted,
    ldd_problem,
    library_path,
    plugin_name,
    plugin_problem,
    plugin_versions,
    symbol_problem,
)
from zerokit.image.plugin_binds import DEPS_MOUNT, PLUGIN_MOUNT

# `ldd -r` of a plugin built on a newer distribution than the image's Debian 12 (glibc 2.36).
NEWER_GLIBC = """\
/opt/zerokit/nccl-plugin/libnccl-net-ofi.so: /lib/x86_64-linux-gnu/libc.so.6: version `GLIBC_2.38' not found \
(required by /opt/zerokit/nccl-plugin/libnccl-net-ofi.so)
\tlinux-vdso.so.1 (0x00007ffc8a7e9000)
\tlibfabric.so.1 => /opt/zerokit/nccl-plugin-deps/libfabric.so.1 (0x00007f0e0c000000)
\tlibc.so.6 => /lib/x86_64-linux-gnu/libc.so.6 (0x00007f0e0be00000)
undefined symbol: __isoc23_strtol, version GLIBC_2.38\t(/opt/zerokit/nccl-plugin/libnccl-net-ofi.so)
"""


def test_ldd_problems_in_order_missing_library_then_version_then_symbol():
    missing = ldd_problem("\tlibfabric.so.1 => not found\nundefined symbol: fi_getinfo\t(/p.so)\n")
    assert missing.startswith("needs libfabric.so.1, which is not found in the image: set ZEROKIT_NCCL_PLUGIN")
    newer = ldd_problem(NEWER_GLIBC)
    assert newer.startswith("needs GLIBC_2.38 of libc.so.6, and the image's (/lib/x86_64-linux-gnu/libc.so.6) is older")
    assert "against the image's GLIBC or an older one" in newer
    assert ldd_problem("undefined symbol: fi_getinfo\t(/p.so)\n").startswith("symbol fi_getinfo is undefined")
    assert ldd_problem("\tlibc.so.6 => /lib/x86_64-linux-gnu/libc.so.6 (0x1)\n") is None


def test_the_versions_each_nccl_takes():
    assert accepted(None) is None and accepted((2, 18)) is None  # no NCCL here, or older than the table: any
    assert accepted((2, 21)) == (5, 8)
    assert accepted((2, 23)) == (5, 9)
    assert accepted((2, 27)) == (6, 10)
    assert accepted((2, 28)) == (6, 11)
    assert accepted((2, 31)) == (6, None)  # newer than the table: the newest row's oldest, and anything newer


def test_a_plugin_nccl_would_not_take_is_named_with_what_it_takes():
    assert symbol_problem([9, 8, 7], (2, 27)) is None
    assert symbol_problem([4], (2, 27)) == (
        "exports v4, the image's NCCL 2.27 takes v6-v10: use a plugin release made for this NCCL"
    )
    assert symbol_problem([11], (2, 21)).startswith("exports v11, the image's NCCL 2.21 takes v5-v8")
    assert symbol_problem([3], None) is None  # a CPU image: no NCCL to judge by, any vN is taken
    assert symbol_problem([], None).startswith("exports no ncclNetPlugin_vN symbol, so it is not an NCCL net plugin")


def test_the_ranks_library_path_puts_the_bound_plugin_and_its_libraries_first():
    environ = {"LD_LIBRARY_PATH": "/usr/local/lib:/opt/zerokit/nccl-plugin"}
    assert library_path(f"{PLUGIN_MOUNT}/libnccl-net.so", environ) == f"{PLUGIN_MOUNT}:{DEPS_MOUNT}:/usr/local/lib"
    assert library_path("/opt/ofi/lib/libnccl-net.so", {}) == "/opt/ofi/lib"


@pytest.fixture(scope="module")
def fake(tmp_path_factory):
    """Built once, for the tests marked needs_gcc (skipped, so never built, without gcc)."""
    return build(tmp_path_factory.mktemp("plugin"))


@needs_gcc
def test_a_real_plugin_passes_with_its_library_on_the_path(fake):
    assert plugin_problem(str(fake.plugin), {"LD_LIBRARY_PATH": str(fake.fabric)}, (2, 27)) is None
    assert plugin_versions(dynamic_symbols(fake.plugin.read_bytes())) == [8]
    assert plugin_name(str(fake.plugin)) == "FakeFabric"


@needs_gcc
def test_a_real_plugin_without_its_library_fails_naming_it(fake):
    problem = plugin_problem(str(fake.plugin), {"PATH": os.environ.get("PATH", "")}, (2, 27))
    assert problem.startswith("needs libfakefabric.so.1, which is not found in the image")
    assert "\n" not in problem


@needs_gcc
def test_a_real_plugin_needing_a_newer_symbol_version_than_the_library_on_the_path_fails(fake):
    """The fabric library on the path has FAKE_1.0 only; the plugin was linked against FAKE_9.99 (as a plugin built
    on a newer distribution needs GLIBC_2.38 of an older image)."""
    problem = plugin_problem(str(fake.plugin), {"LD_LIBRARY_PATH": str(fake.old_fabric)}, (2, 27))
    assert problem.startswith(f"needs FAKE_9.99 of libfakefabric.so.1, and the image's ({fake.old_fabric}/")


@needs_gcc
def test_a_real_plugin_needing_a_newer_glibc_than_this_one_fails_naming_the_version(fake):
    problem = plugin_problem(str(fake.newer_glibc), {}, (2, 27))
    assert problem.startswith(f"needs {NEWER_GLIBC_VERSION} of libc.so.6, and the image's (/"), problem
    assert "against the image's GLIBC or an older one" in problem and "\n" not in problem


@needs_gcc
def test_a_real_library_that_is_no_plugin_fails(fake):
    problem = plugin_problem(str(fake.not_a_plugin), {"LD_LIBRARY_PATH": str(fake.fabric)}, None)
    assert problem.startswith("exports no ncclNetPlugin_vN symbol")
    assert plugin_name(str(fake.not_a_plugin)) is None


def test_a_file_that_is_no_library_fails(tmp_path: Path):
    text = tmp_path / "libnccl-net.so"
    text.write_text("not elf")
    assert plugin_problem(str(text), {}, None).startswith("cannot be read as a shared library (not a 64-bit")
