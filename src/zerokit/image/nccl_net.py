"""NCCL's net plugin judged in the image: its libraries resolve, its glibc (and other) symbol versions are the
image's, and it exports an `ncclNetPlugin_vN` that the image's NCCL accepts. One line for the first problem.

The libraries and versions come from `ldd -r` (only the loader is needed: the runtime image has no binutils),
the exported symbols from the file itself (zerokit.image.elf_symbols). Used by launch before any rank starts
(zerokit.launch.nccl_plugin) and by doctor's transport rows.
"""

from __future__ import annotations

import importlib.metadata
import os
import re
import subprocess
from collections.abc import Mapping
from pathlib import Path

from zerokit.image.elf_symbols import dynamic_symbols, pointed_string
from zerokit.image.plugin_binds import DEPS_MOUNT, PLUGIN_MOUNT, ldd_libraries

SYMBOL = re.compile(r"^ncclNetPlugin_v(\d+)$")
# The net plugin versions each NCCL release's loader tries (newest first; it takes the first found), read from
# NCCL's sources: src/net.cc up to 2.23 (2.19 added v8 and adapts v5-v7; 2.23 v9), src/plugin/net.cc and
# src/plugin/net/net_vN.cc from 2.24 (v10; v5 dropped) to 2.28 (v11; later sources add v12). A newer NCCL than
# the table knows is taken to accept the newest row's oldest version and anything newer.
ACCEPTED: tuple[tuple[tuple[int, int], tuple[int, int]], ...] = (
    ((2, 19), (5, 8)),
    ((2, 23), (5, 9)),
    ((2, 24), (6, 10)),
    ((2, 28), (6, 11)),
)
NCCL_DISTRIBUTIONS = ("nvidia-nccl-cu13", "nvidia-nccl-cu12", "nvidia-nccl-cu11")
MISSING = re.compile(r"^\s+(\S+) => not found")
VERSION = re.compile(r"^(?:\S+: )?(\S+): version `([^']+)' not found \(required by (\S+)\)")
UNDEFINED = re.compile(r"^undefined symbol: ([^\s,]+)")
BIND_FIX = (
    "set ZEROKIT_NCCL_PLUGIN on the host before the job script runs (scripts/container.sh binds the plugin and the "
    "host libraries it needs), or add the library's folder to LD_LIBRARY_PATH"
)


def nccl_version() -> tuple[int, int] | None:
    """The image's NCCL (major, minor), from torch's nvidia-nccl wheel; None without one (a CPU image, a site
    torch with its own NCCL), read without importing torch."""
    for name in NCCL_DISTRIBUTIONS:
        try:
            major, minor, *_ = importlib.metadata.version(name).split(".")
        except (importlib.metadata.PackageNotFoundError, ValueError):
            continue
        return int(major), int(minor)
    return None


def accepted(nccl: tuple[int, int] | None) -> tuple[int, int | None] | None:
    """(oldest, newest) plugin version that NCCL accepts; newest None: any newer too; None: any at all (no NCCL
    known here, or one older than the table)."""
    rows = [versions for release, versions in ACCEPTED if nccl is not None and nccl >= release]
    if not rows:
        return None
    oldest, newest = rows[-1]
    return oldest, None if nccl > ACCEPTED[-1][0] else newest


def ldd_problem(text: str) -> str | None:
    """The first problem `ldd -r` reports, as a phrase with its fix: a library not found, a symbol version the
    image's library lacks (GLIBC_2.38 on an older glibc), an undefined symbol; None when there is none."""
    lines = text.splitlines()
    for name, path in ldd_libraries(text):
        if path is None:
            return f"needs {name}, which is not found in the image: {BIND_FIX}"
    for line in lines:
        if match := VERSION.match(line):
            library, version, _ = match.groups()
            return (
                f"needs {version} of {os.path.basename(library)}, and the image's ({library}) is older: rebuild "
                f"the plugin (and its libraries) against the image's {version.split('_')[0]} or an older one, or "
                "use an image on a newer base"
            )
    for line in lines:
        if match := UNDEFINED.match(line):
            return (
                f"symbol {match.group(1)} is undefined: a library it needs is another version than the one it was "
                "built against; bind the one it was built with"
            )
    return None


def plugin_versions(symbols: Mapping[str, int]) -> list[int]:
    return sorted(int(m.group(1)) for name in symbols if (m := SYMBOL.match(name)))


def symbol_problem(versions: list[int], nccl: tuple[int, int] | None) -> str | None:
    """Why NCCL would not take a plugin exporting ncclNetPlugin_v<versions>; None when it would."""
    if not versions:
        return (
            "exports no ncclNetPlugin_vN symbol, so it is not an NCCL net plugin: name the plugin's own .so "
            "(aws-ofi-nccl: libnccl-net-ofi.so or libnccl-net.so)"
        )
    window = accepted(nccl)
    if window is None:
        return None
    oldest, newest = window
    if any(v >= oldest and (newest is None or v <= newest) for v in versions):
        return None
    known = f"v{oldest}-v{newest}" if newest is not None else f"v{oldest} and newer"
    return (
        f"exports {', '.join(f'v{v}' for v in versions)}, the image's NCCL {nccl[0]}.{nccl[1]} takes {known}: use "
        "a plugin release made for this NCCL"
    )


def library_path(plugin: str, environ: Mapping[str, str]) -> str:
    """LD_LIBRARY_PATH for the ranks: the plugin's folder, and the host libraries the job scripts bound beside it
    (DEPS_MOUNT, when the plugin is the bound one), ahead of what was there."""
    folder = os.path.dirname(plugin)
    ahead = [folder, DEPS_MOUNT] if folder == PLUGIN_MOUNT else [folder]
    return ":".join([*ahead, *(p for p in environ.get("LD_LIBRARY_PATH", "").split(":") if p and p not in ahead)])


def plugin_problem(plugin: str, environ: Mapping[str, str], nccl: tuple[int, int] | None) -> str | None:
    """Why NCCL could not load PLUGIN with ENVIRON (the ranks' variables), in one phrase; None when it could."""
    env = {**environ, "LD_LIBRARY_PATH": library_path(plugin, environ)}
    try:
        data = Path(plugin).read_bytes()
        versions = plugin_versions(dynamic_symbols(data))
    except (OSError, ValueError) as error:
        return f"cannot be read as a shared library ({error}): name the plugin's .so"
    ldd = subprocess.run(["ldd", "-r", plugin], capture_output=True, text=True, env=env)
    return ldd_problem(ldd.stdout + ldd.stderr) or symbol_problem(versions, nccl)


def plugin_name(plugin: str) -> str | None:
    """The name the plugin gives NCCL (its ncclNet struct's first field, which NCCL_NET matches), from its newest
    ncclNetPlugin_vN; None when it exports none or the name cannot be told from the file."""
    data = Path(plugin).read_bytes()
    symbols = dynamic_symbols(data)
    versions = plugin_versions(symbols)
    return pointed_string(data, symbols[f"ncclNetPlugin_v{versions[-1]}"]) if versions else None
