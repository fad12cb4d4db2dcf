"""The DeepSpeed ops the job's config needs that this install has not prebuilt, named before any rank starts.

A rank that loads such an op compiles it (JIT) on every node at start: minutes, and it fails offline or
without a compiler. launch's preflight reads the job's DeepSpeed config once (`ops_loaded`:
zerokit.sources.ds_ops says what it loads) and compares it with the install's prebuilt ops
(zerokit.image.ds_install), naming the difference in one line: a warning, or with `--strict-ops` a refusal
(exit 2), nothing started. The same ops decide which of doctor's failed op checks refuse the job
(zerokit.launch.preflight).

The config is the one the launched command names: `train --config NAME|FILE` (else ZEROKIT_CONFIG, else train's
default; `none`: no DeepSpeed), or any other command's `--deepspeed_config FILE` (DeepSpeed's own flag) or
`--deepspeed FILE` (HF's TrainingArguments). train's is checked as train checks it (zerokit.sources.ds_config_check:
a missing file, bad JSON, a misspelt key, a wrong value), so launch refuses it here, before any rank starts; a
script's that does not exist or is not JSON is left to the script, which reports it.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path

from zerokit.foundations.errors import UserError
from zerokit.foundations.flags import flag_value
from zerokit.image.ds_install import Prebuilt
from zerokit.sources.ds_config_check import check_ds_config
from zerokit.sources.ds_configs import DEFAULT_CONFIG, resolve_ds_config
from zerokit.sources.ds_ops import ops_needed

TRAIN = ("-m", "zerokit", "train")  # a target's argv after the interpreter (zerokit.launch.config.target_argv)
SCRIPT_FLAGS = ("--deepspeed_config", "--deepspeed")  # DeepSpeed's `--deepspeed` alone is a switch: no value


def job_ds_config(argv: Sequence[str], environ: Mapping[str, str]) -> dict | None:
    """The DeepSpeed config the command runs with; None for none, or a script's it cannot read (it says why).
    One train would refuse raises UserError."""
    words = list(argv)
    if tuple(words[1:4]) == TRAIN:
        name = flag_value(words[4:], "--config") or environ.get("ZEROKIT_CONFIG") or DEFAULT_CONFIG
        path = resolve_ds_config(name)
        if path is None:
            return None
        check_ds_config(path)
        return read_config(path)
    for flag in SCRIPT_FLAGS:
        value = flag_value(words, flag)
        if value and not value.startswith("-") and (config := read_config(Path(value))) is not None:
            return config
    return None


def read_config(path: Path) -> dict | None:
    try:
        config = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError):
        return None
    return config if isinstance(config, dict) else None


def ops_loaded(target: Sequence[str], environ: Mapping[str, str], prebuilt: Prebuilt | None) -> dict[str, str] | None:
    """op -> why, for each op the job's DeepSpeed config makes a rank load (DS_ACCELERATOR overrides the install's
    accelerator); None when that is not known: no DeepSpeed installed, or no config the job names that can be read."""
    if prebuilt is None or (config := job_ds_config(target, environ)) is None:
        return None
    return ops_needed(config, environ.get("DS_ACCELERATOR") or prebuilt.accelerator)


def unbuilt_line(missing: Mapping[str, str]) -> str:
    """One line naming the ops, why the job needs them, what it costs and the fix."""
    ops = ", ".join(f"{op} ({why})" for op, why in missing.items())
    one = len(missing) == 1
    return (
        f"DeepSpeed op{'' if one else 's'} {ops} {'is' if one else 'are'} not prebuilt in this install: DeepSpeed "
        f"will JIT-compile {'it' if one else 'them'} on every node at start (minutes; fails offline or without a "
        f"compiler); add {'it' if one else 'them'} to the stack's ds_ops and rebuild the image, or change the "
        "config to ops that are prebuilt"
    )


def check_job_ops(loaded: Mapping[str, str] | None, prebuilt: Prebuilt | None, strict: bool) -> dict[str, str]:
    """Warn on stderr about the ops the job loads (`ops_loaded`) and this install lacks, or with `strict` raise
    UserError. Returns those ops; none when DeepSpeed is not installed (doctor's check names that) or the job has
    no config."""
    if prebuilt is None or not loaded:
        return {}
    missing = {op: why for op, why in loaded.items() if not prebuilt.ops.get(op, False)}
    if missing and strict:
        raise UserError(f"{unbuilt_line(missing)}; not starting (--strict-ops)")
    if missing:
        print(f"launch: warning: {unbuilt_line(missing)} (--strict-ops refuses to start)", file=sys.stderr)
    return missing
