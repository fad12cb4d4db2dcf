"""The host's NCCL net plugin bound into a container: the plugin's folder and the host libraries it needs.

Sites build NCCL's net plugin (aws-ofi-nccl for Slingshot and EFA, NVIDIA's SHARP plugin) against the host's
libfabric and its provider; the image cannot carry it. The job scripts (`scripts/container.sh`) run this file
with the host's python3 (standard library only) when ZEROKIT_NCCL_PLUGIN names the plugin's .so, or a folder
holding one `libnccl-net*.so`:

    python3 src/zerokit/image/plugin_binds.py PLUGIN

prints runtimes.py's options, one word per line: the plugin's folder bound at PLUGIN_MOUNT, each library it
needs (`ldd` on the host: libfabric, its provider's libraries, their dependencies) at DEPS_MOUNT/<soname>, and
ZEROKIT_NCCL_PLUGIN set inside to the plugin's path there. Inside, `launch` gives the ranks NCCL_NET_PLUGIN and
LD_LIBRARY_PATH from it (zerokit.launch.nccl_plugin) and checks the plugin before any rank starts.

glibc, the loader, the C++ runtime and the GPU driver are never bound: the image's own serve (the runtime's GPU
flag binds the driver), and launch's check names a plugin that needs newer ones than the image has.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

VARIABLE = "ZEROKIT_NCCL_PLUGIN"
PLUGIN_MOUNT = "/opt/zerokit/nccl-plugin"
DEPS_MOUNT = "/opt/zerokit/nccl-plugin-deps"
PLUGIN_GLOB = "libnccl-net*.so"
# The image's own, never the host's: glibc's libraries and loader, the C++/gcc runtime, the GPU driver.
BASE_LIBRARIES = re.compile(
    r"^(linux-vdso|linux-gate|ld-linux[^/]*|ld64|libc|libm|libmvec|libpthread|libdl|librt|libresolv|libutil|"
    r"libanl|libnsl|libBrokenLocale|libthread_db|libgcc_s|libstdc\+\+|libcuda|libnvidia-[\w-]+)\.so(\.|$)"
)
# `ldd` lines: "\tlibfabric.so.1 => /usr/lib64/libfabric.so.1 (0x...)", "\tlibx.so.1 => not found",
# "\t/lib64/ld-linux-x86-64.so.2 (0x...)", "\tlinux-vdso.so.1 (0x...)".
LDD_LINE = re.compile(r"^\s+(\S+)(?: => (not found|\S+))?(?: \(0x[0-9a-f]+\))?\s*$")


def plugin_file(path: str) -> Path:
    """The plugin's .so: PATH itself, or the one `libnccl-net*.so` in the folder PATH (symlinks to one file
    count once). Raises ValueError naming what is there."""
    given = Path(path)
    if given.is_file():
        return given
    if not given.is_dir():
        raise ValueError(f"{VARIABLE}={path}: no such file or folder: name the NCCL net plugin's .so or its folder")
    found = sorted(given.glob(PLUGIN_GLOB))
    real = sorted({os.path.realpath(p) for p in found})
    if len(real) != 1:
        what = "none" if not found else ", ".join(p.name for p in found)
        raise ValueError(
            f"{VARIABLE}={path}: a folder must hold one NCCL net plugin ({PLUGIN_GLOB}), it holds {what}: "
            "name the plugin's .so"
        )
    return found[0]


def ldd_libraries(text: str) -> list[tuple[str, str | None]]:
    """(name, path) of each library `ldd` lists; path None where ldd says "not found", the name itself where
    ldd gives a path only (the loader)."""
    found = []
    for line in text.splitlines():
        match = LDD_LINE.match(line)
        if match:
            name, where = match.groups()
            found.append((name, None if where == "not found" else where or name))
    return found


def host_libraries(ldd_text: str, plugin: str) -> list[tuple[str, str]]:
    """(soname, host path) of the libraries to bind: those ldd lists, less the image's own (BASE_LIBRARIES).
    Raises ValueError for one the host itself does not find."""
    libraries = []
    for name, path in ldd_libraries(ldd_text):
        soname = os.path.basename(name)
        if BASE_LIBRARIES.match(soname):
            continue
        if path is None:
            raise ValueError(
                f"on this host {plugin} needs {name}, which ldd does not find: load the module that provides it "
                "(e.g. `module load libfabric`) or add its folder to LD_LIBRARY_PATH before the job script runs"
            )
        libraries.append((soname, path))
    return libraries


def options(plugin: Path, ldd_text: str) -> list[str]:
    """runtimes.py's options binding the plugin (its real file's folder) and its host libraries, and naming it
    inside."""
    real = Path(os.path.realpath(plugin))
    words = ["--bind", f"{real.parent}:{PLUGIN_MOUNT}"]
    for soname, path in host_libraries(ldd_text, str(plugin)):
        words += ["--bind", f"{os.path.realpath(path)}:{DEPS_MOUNT}/{soname}"]
    return [*words, "--env", f"{VARIABLE}={PLUGIN_MOUNT}/{real.name}"]


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print(__doc__.split("\n\n")[2], file=sys.stderr)
        return 2
    try:
        plugin = plugin_file(argv[0])
        ldd = subprocess.run(["ldd", str(plugin)], capture_output=True, text=True)
        if ldd.returncode != 0 and not ldd_libraries(ldd.stdout):
            raise ValueError(f"ldd {plugin}: {(ldd.stderr or ldd.stdout).strip()}: name a shared library")
        print("\n".join(options(plugin, ldd.stdout)))
    except (ValueError, OSError) as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
