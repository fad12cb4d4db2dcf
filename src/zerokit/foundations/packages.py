"""Installed distributions: a package's version as this interpreter's environment holds it."""

from __future__ import annotations

from importlib import metadata


def installed_version(name: str) -> str | None:
    """The version of the distribution `name` installed where this interpreter looks, or None."""
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return None
