"""A fake NCCL net plugin and the fake fabric library it needs, compiled with gcc into a folder: real shared
objects for the plugin's binding and checks (tests of image.plugin_binds, image.nccl_net, launch, doctor)."""

from __future__ import annotations

import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

import pytest

needs_gcc = pytest.mark.skipif(shutil.which("gcc") is None, reason="gcc compiles the fake plugin")

FABRIC = "int fake_fi_getinfo(void) { return 42; }\n"
PLUGIN = """
extern int fake_fi_getinfo(void);
typedef struct { const char* name; int (*init)(void); } fake_net_t;
static int init(void) { return fake_fi_getinfo(); }
fake_net_t ncclNetPlugin_v8 = { "FakeFabric", init };
"""
NOT_A_PLUGIN = "extern int fake_fi_getinfo(void);\nint fake_value(void) { return fake_fi_getinfo(); }\n"
# A plugin built on a newer distribution than the image's: linked against a stand-in libc.so.6 whose strlcpy has
# version GLIBC_2.99, it needs that version of libc.so.6 (its .gnu.version_r), as a real one built on glibc 2.38
# needs GLIBC_2.38; no glibc has it, so `ldd -r` reports "version `GLIBC_2.99' not found" on every machine.
NEWER_GLIBC_VERSION = "GLIBC_2.99"
STAND_IN_LIBC = "unsigned long strlcpy(char* d, const char* s, unsigned long n) { return 0; }\n"
NEWER_GLIBC_PLUGIN = """
extern unsigned long strlcpy(char* d, const char* s, unsigned long n);
typedef struct { const char* name; int (*init)(void); } fake_net_t;
static char copied[8];
static int init(void) { return (int)strlcpy(copied, "fake", sizeof copied); }
fake_net_t ncclNetPlugin_v8 = { "FakeNewerGlibc", init };
"""


@dataclass(frozen=True)
class FakePlugin:
    plugin: Path  # plugin/libnccl-net-fake.so, needing libfakefabric.so.1 (symbol version FAKE_9.99)
    fabric: Path  # fabric/: libfakefabric.so.1 as the plugin was linked against
    old_fabric: Path  # old-fabric/: libfakefabric.so.1 with only FAKE_1.0
    not_a_plugin: Path  # other/libnccl-net-none.so: no ncclNetPlugin_vN
    newer_glibc: Path  # newer-glibc/libnccl-net-glibc.so: needs NEWER_GLIBC_VERSION of libc.so.6, and no other library


def compile_library(folder: Path, name: str, source: str, *options: str) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / f"{name}.c").write_text(source)
    output = folder / name
    argv = ["gcc", "-shared", "-fPIC", "-o", str(output), str(folder / f"{name}.c"), *options]
    subprocess.run(argv, check=True, capture_output=True, text=True)
    return output


def versioned_fabric(folder: Path, version: str) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    script = folder.parent / f"{folder.name}.map"
    script.write_text(f"{version} {{ global: fake_fi_getinfo; local: *; }};\n")
    options = ("-Wl,-soname,libfakefabric.so.1", f"-Wl,--version-script={script}")
    return compile_library(folder, "libfakefabric.so.1", FABRIC, *options)


def newer_glibc_plugin(root: Path) -> Path:
    """The plugin linked (without the real libc: -nostdlib) against the stand-in libc.so.6 built under root."""
    script = root / "newer-glibc.map"
    script.write_text(f"{NEWER_GLIBC_VERSION} {{ global: strlcpy; local: *; }};\n")
    options = ("-nostdlib", "-Wl,-soname,libc.so.6", f"-Wl,--version-script={script}")
    libc = compile_library(root / "libc", "libc.so.6", STAND_IN_LIBC, *options)
    link = ("-nostdlib", f"-L{libc.parent}", "-l:libc.so.6")
    return compile_library(root / "newer-glibc", "libnccl-net-glibc.so", NEWER_GLIBC_PLUGIN, *link)


def build(root: Path) -> FakePlugin:
    """Compile the fabric library (two versions), the plugin, a library that is no plugin, and a plugin needing a
    newer glibc than any, under root."""
    fabric = versioned_fabric(root / "fabric", "FAKE_9.99").parent
    versioned_fabric(root / "old-fabric", "FAKE_1.0")
    link = (f"-L{fabric}", "-l:libfakefabric.so.1")
    plugin = compile_library(root / "plugin", "libnccl-net-fake.so", PLUGIN, *link)
    other = compile_library(root / "other", "libnccl-net-none.so", NOT_A_PLUGIN, *link)
    return FakePlugin(plugin, fabric, root / "old-fabric", other, newer_glibc_plugin(root))
