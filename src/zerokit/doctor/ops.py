"""DeepSpeed ops: every op the stack requires is prebuilt and loads, so no run starts with a JIT compile.

The per-op verdict is `zerokit.image.ops_gate.check_op`, the same gate the image build runs.
"""

from __future__ import annotations

from zerokit.doctor.context import Context
from zerokit.doctor.result import CheckResult, fail, ok
from zerokit.image.ops_gate import LOAD_FAILURE, check_op

OP_ROW = "op: "  # the name of an op's row: "op: async_io"


def ops_fix(stack_name: str) -> str:
    return (
        f"rebuild DeepSpeed with the stack's ops prebuilt: `make venv STACK={stack_name}` or rebuild the image "
        f"(the build runs `zerokit ops-gate {stack_name}`); to add an op, list it in ds_ops of the stack file"
    )


def load_fix(stack_name: str) -> str:
    """A prebuilt op that does not load mostly lacks a library on this node, which no rebuild brings."""
    return (
        "install on this node the library the error names (libaio.so.1: the libaio1 package, libaio1t64 on "
        f"Ubuntu 24.04) or add its folder to LD_LIBRARY_PATH; if the op itself is broken, {ops_fix(stack_name)}"
    )


def op_of(result: CheckResult) -> str | None:
    """The op an op's row is about; None for any other row (DeepSpeed's import, the would-JIT list, other checks)."""
    return result.name.removeprefix(OP_ROW) if result.name.startswith(OP_ROW) else None


def check_ops(ctx: Context) -> list[CheckResult]:
    try:
        import deepspeed
    except Exception as error:  # a broken DeepSpeed is the finding, not a crash
        return [
            fail(
                "ops: deepspeed",
                f"deepspeed failed to import: {type(error).__name__}: {error}",
                ops_fix(ctx.stack.name),
            )
        ]
    results = []
    for name in ctx.stack.ds_ops:
        status = check_op(name)
        if status.ok:
            results.append(ok(f"{OP_ROW}{name}", status.detail))
        else:
            fix = (load_fix if status.detail.startswith(LOAD_FAILURE) else ops_fix)(ctx.stack.name)
            results.append(fail(f"{OP_ROW}{name}", f"{name}: {status.detail}", fix))
    return [*results, _would_jit(deepspeed, ctx.stack.ds_ops)]


def _would_jit(deepspeed, required: tuple[str, ...]) -> CheckResult:
    """The ops of this accelerator that are not prebuilt: using one would compile it at start-up.

    Informational (ok): the stack leaves them out on purpose (deepspeed_ccl_comm needs oneCCL, ...). Whether a
    job needs one depends on its DeepSpeed config: launch's preflight reads it and names the op before any rank
    starts (zerokit.launch.job_ops; `--strict-ops` refuses).
    """
    from deepspeed.git_version_info import installed_ops
    from deepspeed.ops.op_builder.all_ops import ALL_OPS

    missing = sorted(
        name
        for name in ALL_OPS
        if not installed_ops.get(name, False) and name not in required and not name.endswith("not_implemented")
    )
    prebuilt = sorted(name for name in ALL_OPS if installed_ops.get(name, False))
    detail = f"DeepSpeed {deepspeed.__version__}: {len(prebuilt)} prebuilt"
    detail += (
        f"; not prebuilt, JIT-compiled if used: {', '.join(missing)} (launch names those a job's config needs)"
        if missing
        else "; nothing would JIT"
    )
    return ok("ops: would JIT", detail)
