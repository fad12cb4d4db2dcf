"""Where zerokit's data files live: the checkout in development, `$ZEROKIT_HOME` in an image."""

from __future__ import annotations

import os
from pathlib import Path

HOME = Path(os.environ.get("ZEROKIT_HOME", Path(__file__).resolve().parents[3]))
CONFIGS_DIR = HOME / "configs"
STACKS_DIR = HOME / "containers" / "stacks"
# A derived image's extra packages, locked (containers/build-extra-image puts it there; doctor checks it).
EXTRA_LOCK = HOME / "containers" / "lock" / "extra.txt"
