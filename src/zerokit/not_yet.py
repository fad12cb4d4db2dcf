"""Commands whose issues are still open: they say so and exit 2."""

from __future__ import annotations

import sys


def _not_yet(name: str) -> int:
    print(f"{name}: not yet implemented", file=sys.stderr)
    return 2


def bench(argv: list[str]) -> int:
    return _not_yet("bench")
