"""The DeepSpeed ops the job's config needs that this install has not prebuilt, named before any rank starts.

A rank that loads such an op compiles it (JIT) on every node at start: minutes, and it fails offline or
without a compiler. launch's preflight reads the job's DeepSpeed config once (`ops_loaded`:
zerokit.sources.ds_ops says what it loads) and compares it with the install's prebuilt ops
(zerokit.image.ds_install), naming the difference in one line: a warning, or with `--strict-ops` a refusal
(exit 2), nothing started. The same ops decide which of doctor's failed op checks refuse the job
(zerokit.launch.preflight).

The config is the one the launched command names, as its record reads it (zerokit.launch.job):
`train --config NAME|FILE` (else ZEROKIT_CONFIG, else train's default; `none`: no DeepSpeed; with `--compile
deepcompile`, as train hands it to DeepSpeed: its compile.deepcompile on), or any other command's
`--deepspeed_config FILE` (DeepSpeed's own flag) or `--deepspeed FILE` (HF's TrainingArguments). train's is checked
as train checks it (zerokit.sources.ds_config_check: a missing file, bad JSON, a misspelt key, a wrong value), so
launch refuses it here, before any rank starts; a script's that does not exist or is not JSON is left to the
script, which reports it.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Mapping
from pathlib import Path

from zerokit.foundations.errors import UserError
from zerokit.image.ds_install import Prebuilt
from zerokit.launch.job import Job
from zerokit.sources.ds_config_check import check_ds_config
from zerokit.sources.ds_configs import resolve_ds_config
from zerokit.sources.ds_ops import ops_needed


def job_ds_config(job: Job) -> dict | None:
    """The DeepSpeed config the job runs with; None for none, or a script's it cannot read (it says why).
    One train would refuse raises UserError."""
    if job.kind == "train":
        path = resolve_ds_config(job.ds_configs[0])
        if path is None:
            return None
        check_ds_config(path, pipelined=job.pipelined)
        config = read_config(path)
        if config is not None and job.deepcompile:  # zerokit.train.options.ds_config_argument
            compiled = config.get("compile")
            config = {**config, "compile": {**(compiled if isinstance(compiled, dict) else {}), "deepcompile": True}}
        return config
    for value in job.ds_configs:
        if (config := read_config(Path(value))) is not None:
            return config
    return None


def read_config(path: Path) -> dict | None:
    try:
        config = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError):
        return None
    return config if isinstance(config, dict) else None


def ops_loaded(job: Job, environ: Mapping[str, str], prebuilt: Prebuilt | None) -> dict[str, str] | None:
    """op -> why, for each op the job's DeepSpeed config makes a rank load (DS_ACCELERATOR overrides the install's
    accelerator); None when that is not known: no DeepSpeed installed, or no config the job names that can be read."""
    if prebuilt is None or (config := job_ds_config(job)) is None:
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
