"""Which DeepSpeed ops the installed DeepSpeed prebuilt, and for which accelerator, read without importing it.

Importing DeepSpeed imports torch (seconds); launch needs these two values before any rank starts. DeepSpeed's
setup.py writes them into deepspeed/git_version_info_installed.py as assignments of literals
(`installed_ops={'cpu_adam': True, ...}`, `accelerator_name='cpu'`), which `deepspeed.git_version_info` imports.
"""

from __future__ import annotations

import ast
import importlib.util
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Prebuilt:
    accelerator: str  # the accelerator DeepSpeed was built for ("cpu", "cuda", ...)
    ops: dict[str, bool]  # installed_ops: every op of that accelerator, True where prebuilt


def read_prebuilt() -> Prebuilt | None:
    """The installed DeepSpeed's prebuilt ops; None without DeepSpeed, or one installed without the file."""
    spec = importlib.util.find_spec("deepspeed")
    if spec is None or not spec.submodule_search_locations:
        return None
    path = Path(next(iter(spec.submodule_search_locations))) / "git_version_info_installed.py"
    try:
        return parse_installed(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, SyntaxError):
        return None


def parse_installed(text: str) -> Prebuilt | None:
    """The values of git_version_info_installed.py's text; None when installed_ops is not a literal dict."""
    values = {}
    for node in ast.parse(text).body:
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            try:
                values[node.targets[0].id] = ast.literal_eval(node.value)
            except (ValueError, TypeError, SyntaxError):
                continue
    ops, accelerator = values.get("installed_ops"), values.get("accelerator_name", "")
    if not isinstance(ops, dict) or not isinstance(accelerator, str):
        return None
    return Prebuilt(accelerator, {str(op): bool(built) for op, built in ops.items()})
