"""doctor's checks that decide whether training can start on this node, run by `launch` before it.

A failed check stops the launch with its fix, before the ranks start and time out on each other.
Once per node: in per-rank mode only local rank 0 checks.
"""

from __future__ import annotations

import sys
from collections.abc import Mapping

from zerokit.launch.plan import Plan


def preflight_failures(plan: Plan, environ: Mapping[str, str]) -> list[str]:
    """One line per failed check ("name: detail; fix: ..."); empty when training can start."""
    from zerokit.doctor.caches import check_caches
    from zerokit.doctor.checks import run_checks
    from zerokit.doctor.context import DEFAULT_STACK, Context
    from zerokit.doctor.host import check_shm
    from zerokit.doctor.network import check_interface
    from zerokit.doctor.ops import check_ops
    from zerokit.stack import load_stack

    context = Context(
        stack=load_stack(environ.get("ZEROKIT_STACK") or DEFAULT_STACK),
        environ=environ,
        ifname=plan.ifname,
        multi_node=plan.nnodes > 1,
    )
    results = run_checks(context, (check_ops, check_shm, check_interface, check_caches))
    return [f"{r.name}: {r.detail}; fix: {r.fix}" for r in results if r.status == "fail"]


def runs_preflight(plan: Plan) -> bool:
    """Once per node: not for a head-node launch, and in per-rank mode only on local rank 0."""
    if plan.mode == "remote":
        return False
    return plan.mode == "spawn" or plan.commands[0].env.get("LOCAL_RANK", "0") == "0"


def report(failures: list[str]) -> None:
    for line in failures:
        print(f"launch: preflight failed: {line}", file=sys.stderr)
    print("launch: not starting; fix the above, or skip the checks with --no-preflight", file=sys.stderr)
