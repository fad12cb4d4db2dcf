"""The input of every check: what the user asked for, and the environment to judge.

Built once (by the CLI from argv and os.environ, by `launch` from its own options); checks read
variables from `environ`, never from os.environ, so tests pass plain dicts.
"""

from __future__ import annotations

import os
import pwd
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType

from zerokit.image.stack import Stack


@dataclass(frozen=True)
class Context:
    stack: Stack
    environ: Mapping[str, str] = field(default_factory=dict)
    require_gpu: bool = False
    model: str | None = None
    dataset: str | None = None
    ifname: str | None = None
    multi_node: bool = False

    def __post_init__(self) -> None:
        # A read-only copy: a check cannot change what the next one sees.
        object.__setattr__(self, "environ", MappingProxyType(dict(self.environ)))

    @property
    def home(self) -> Path:
        return Path(self.environ.get("HOME") or pwd.getpwuid(os.getuid()).pw_dir)  # not os.environ's HOME

    @property
    def xdg_cache(self) -> Path:
        return Path(self.environ.get("XDG_CACHE_HOME") or self.home / ".cache")

    def flag(self, name: str) -> bool:
        """An on/off variable as huggingface_hub reads them: 1, true, yes or on."""
        return self.environ.get(name, "").strip().lower() in ("1", "true", "yes", "on")
