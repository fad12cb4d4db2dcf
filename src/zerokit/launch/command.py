"""A command the plan says to run: its argv and the variables set for it (the plan's unit, the supervisor's input)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Command:
    argv: tuple[str, ...]
    env: dict[str, str]  # variables set on top of the parent's environment
    host: str | None = None  # the one host a head-node launcher's command starts the job on (pdsh, per host)
