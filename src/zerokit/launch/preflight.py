"""doctor's checks that decide whether training can start on this node, run by `launch` before it.

A failed check stops the launch with its fix, before the ranks start and time out on each other; a failed
DeepSpeed op stops only a job that loads it, and is a warning for any other (preflight_failures).
Once per node: in per-rank mode only local rank 0 checks.

Loading every DeepSpeed op (check_ops) is the one slow check (seconds: it imports DeepSpeed and
dlopens each op). Its verdict depends only on the installed files and the node, so a passing
verdict is kept in the cache (`$ZEROKIT_CACHE/preflight/`, else ~/.cache/zerokit/preflight/)
under a fingerprint of the Python, the DeepSpeed and torch installs (paths, sizes and mtimes of
their op libraries and version files), the stack's ops, the host and the GPU driver; the next
launch with the same fingerprint skips it. A failure is never kept: it is checked every time.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import os
import socket
import sys
from collections.abc import Mapping
from pathlib import Path

from zerokit.launch.plan import Plan


def preflight_failures(plan: Plan, environ: Mapping[str, str], loaded: Mapping[str, str] | None) -> list[str]:
    """One line per failed check that refuses this job ("name: detail; fix: ..."); empty when training can start.

    Preflight refuses only for what the job uses. A DeepSpeed op of the stack that fails (not prebuilt, or
    prebuilt but failing to load: a library it links missing on this node) refuses a job whose DeepSpeed config
    loads it (`loaded`: zerokit.launch.job_ops.ops_loaded) and is a warning on stderr for any other: a ZeRO-2
    job must not be refused because async_io cannot find libaio. A job whose config launch cannot read (None: a
    user's script without --deepspeed FILE, `train --config none`) is only warned too: refusing it would refuse
    every such job for ops it may never load, and one that does load the op fails in DeepSpeed with the same
    error, which the warning named first. DeepSpeed itself failing to import refuses every job.
    """
    from zerokit.doctor.caches import check_caches
    from zerokit.doctor.checks import run_checks
    from zerokit.doctor.context import Context
    from zerokit.doctor.host import check_shm
    from zerokit.doctor.network import check_interface
    from zerokit.doctor.ops import check_ops, op_of
    from zerokit.image.stack import environment_stack, load_stack

    context = Context(
        stack=load_stack(environment_stack(environ)),
        environ=environ,
        ifname=plan.ifname,
        multi_node=plan.nnodes > 1,
    )
    verdict = ops_verdict_file(context.stack.name, context.stack.ds_ops, environ)
    ops_known_good = verdict is not None and verdict.is_file()
    checks = (
        (check_shm, check_interface, check_caches)
        if ops_known_good
        else (check_ops, check_shm, check_interface, check_caches)
    )
    results = run_checks(context, checks)
    failed = [r for r in results if r.status == "fail"]
    if not ops_known_good and verdict is not None and not any(r.name.startswith("op") for r in failed):
        remember(verdict)
    refusals = []
    for result in failed:
        op = op_of(result)
        if op is None:
            refusals.append(f"{result.name}: {result.detail}; fix: {result.fix}")
        elif loaded is not None and op in loaded:
            loads = f"the job's DeepSpeed config loads it ({loaded[op]})"
            refusals.append(f"{result.name}: {result.detail}; {loads}; fix: {result.fix}")
        else:
            warning = f"{result.name}: {result.detail}; {spared(loaded)}; fix: {result.fix}"
            print(f"launch: warning: {warning}", file=sys.stderr)
    return refusals


def spared(loaded: Mapping[str, str] | None) -> str:
    """Why a failed op does not stop this job."""
    if loaded is None:
        return "starting anyway: the job names no DeepSpeed config launch can read (a rank that loads the op fails)"
    return "starting anyway: the job's DeepSpeed config does not load it"


def ops_verdict_file(stack: str, ops: tuple[str, ...], environ: Mapping[str, str]) -> Path | None:
    """Where a passing ops verdict for this install and node lives; None when DeepSpeed is not found."""
    fingerprint = install_fingerprint(stack, ops, environ)
    if fingerprint is None:
        return None
    cache = Path(environ.get("ZEROKIT_CACHE") or Path.home() / ".cache" / "zerokit")
    return cache / "preflight" / f"ops-{hashlib.sha256(fingerprint.encode()).hexdigest()[:24]}.ok"


def install_fingerprint(stack: str, ops: tuple[str, ...], environ: Mapping[str, str]) -> str | None:
    """Everything the ops verdict depends on, as text; found without importing DeepSpeed or torch."""
    files: list[Path] = []
    for package in ("deepspeed", "torch"):
        spec = importlib.util.find_spec(package)
        if spec is None or not spec.submodule_search_locations:
            if package == "deepspeed":
                return None
            continue
        root = Path(next(iter(spec.submodule_search_locations)))
        files += [root / "__init__.py", root / "version.py", root / "git_version_info_installed.py"]
        if package == "deepspeed":
            files += sorted((root / "ops").rglob("*.so"))
    stats = []
    for path in files:
        try:
            st = path.stat()
        except OSError:
            continue
        stats.append(f"{path}:{st.st_size}:{st.st_mtime_ns}")
    driver = Path("/proc/driver/nvidia/version")
    return json.dumps(
        {
            "python": os.path.realpath(sys.executable),
            "stack": stack,
            "ops": list(ops),
            "files": stats,
            "host": socket.gethostname(),
            "driver": driver.read_text() if driver.exists() else "",
            "accelerator": environ.get("DS_ACCELERATOR", ""),
            "devices": environ.get("CUDA_VISIBLE_DEVICES", ""),
        }
    )


def remember(verdict: Path) -> None:
    """Keep a passing verdict; an unwritable cache only means the next launch checks again."""
    try:
        verdict.parent.mkdir(parents=True, exist_ok=True)
        verdict.write_text("every op of the stack prebuilt and loading (zerokit launch preflight)\n")
    except OSError:
        pass


def runs_preflight(plan: Plan) -> bool:
    """Once per node: not for a head-node launch, and in per-rank mode only on local rank 0."""
    if plan.mode == "remote":
        return False
    return plan.mode == "spawn" or plan.commands[0].env.get("LOCAL_RANK", "0") == "0"


def report(failures: list[str]) -> None:
    for line in failures:
        print(f"launch: preflight failed: {line}", file=sys.stderr)
    print("launch: not starting; fix the above, or skip the checks with --no-preflight", file=sys.stderr)
