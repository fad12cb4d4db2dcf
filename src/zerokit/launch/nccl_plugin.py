"""The host's NCCL net plugin for the ranks (`--nccl-plugin`, `--nccl-net-strict`): named, put in their
environment, and checked before any rank starts.

The job scripts bind the plugin into the container and name it there in ZEROKIT_NCCL_PLUGIN
(zerokit.image.plugin_binds); launch gives the ranks NCCL_NET_PLUGIN (the path: NCCL 2.20 and later take one) and
LD_LIBRARY_PATH with the plugin's folder and its bound host libraries first, and with --nccl-net-strict NCCL_NET,
the plugin's own name, so NCCL fails instead of falling back to TCP sockets.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from zerokit.foundations.errors import UserError
from zerokit.image.nccl_net import library_path, nccl_version, plugin_name, plugin_problem
from zerokit.image.plugin_binds import plugin_file

PLUGIN_VARIABLE = "ZEROKIT_NCCL_PLUGIN"
STRICT_VARIABLE = "ZEROKIT_NCCL_NET_STRICT"


@dataclass(frozen=True)
class NcclPlugin:
    path: str  # the plugin's .so, as the ranks see it
    net: str | None = None  # NCCL_NET for the ranks (--nccl-net-strict): the plugin's name


def nccl_plugin(path: str | None, strict: bool) -> NcclPlugin | None:
    """The plugin that --nccl-plugin names (its .so, or a folder holding one), with its name when strict."""
    if path is None:
        if strict:
            raise UserError("--nccl-net-strict pins NCCL to a plugin's network: name it with --nccl-plugin PATH")
        return None
    try:
        found = str(plugin_file(path))
    except ValueError as error:
        raise UserError(str(error).replace(PLUGIN_VARIABLE, "--nccl-plugin", 1)) from None
    if not strict:
        return NcclPlugin(found)
    try:
        name = plugin_name(found)
    except (OSError, ValueError) as error:
        raise UserError(f"--nccl-net-strict: cannot read {found}'s name ({error}): name the plugin's .so") from None
    if not name:
        raise UserError(
            f"--nccl-net-strict: {found} names no network (no ncclNetPlugin_vN with a name): name the plugin's .so, "
            "or drop --nccl-net-strict"
        )
    return NcclPlugin(found, name)


def plugin_env(plugin: NcclPlugin | None, environ: Mapping[str, str]) -> dict[str, str]:
    """The ranks' variables for the plugin; none without one."""
    if plugin is None:
        return {}
    env = {"NCCL_NET_PLUGIN": plugin.path, "LD_LIBRARY_PATH": library_path(plugin.path, environ)}
    return {**env, "NCCL_NET": plugin.net} if plugin.net else env


def forwarded(plugin: NcclPlugin | None) -> dict[str, str]:
    """What a head-node launch passes on to the nodes' launches, which name and check the plugin again."""
    if plugin is None:
        return {}
    return {PLUGIN_VARIABLE: plugin.path, **({STRICT_VARIABLE: "1"} if plugin.net else {})}


def check_nccl_plugin(plugin: NcclPlugin | None, environ: Mapping[str, str]) -> None:
    """Refuse, in one line, a plugin NCCL could not load with the ranks' variables ENVIRON; before any rank starts."""
    if plugin is None:
        return
    problem = plugin_problem(plugin.path, environ, nccl_version())
    if problem:
        raise UserError(f"NCCL net plugin {plugin.path} {problem}")
