"""The checks, in the order the table shows them, and the one function that runs them.

`doctor`, `launch` and the image build call run_checks(); nothing registers itself on import.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from zerokit.doctor.caches import check_caches
from zerokit.doctor.container import check_container
from zerokit.doctor.context import Context
from zerokit.doctor.gpu import check_gpu
from zerokit.doctor.host import check_cpu_target, check_limits, check_shm
from zerokit.doctor.hub import check_hub
from zerokit.doctor.launchers import check_launchers
from zerokit.doctor.network import check_hostname, check_interface
from zerokit.doctor.ops import check_ops
from zerokit.doctor.result import CheckResult, fail
from zerokit.doctor.shadows import check_user_packages
from zerokit.doctor.transport import check_transport
from zerokit.doctor.versions import check_cuda_libraries, check_lock, check_packages, check_python, check_site_torch

Check = Callable[[Context], list[CheckResult]]

CHECKS: tuple[Check, ...] = (
    check_python,
    check_packages,
    check_site_torch,
    check_lock,
    check_user_packages,
    check_cuda_libraries,
    check_ops,
    check_gpu,
    check_cpu_target,
    check_shm,
    check_limits,
    check_interface,
    check_hostname,
    check_transport,
    check_hub,
    check_caches,
    check_launchers,
    check_container,
)


def check_id(check: Check) -> str:
    """The name `--skip` takes: check_shm -> shm."""
    return check.__name__.removeprefix("check_")


def run_check(check: Check, ctx: Context) -> list[CheckResult]:
    try:
        return list(check(ctx))
    except Exception as error:  # one broken check must not hide the others' results
        return [
            fail(
                check_id(check),
                f"the check itself crashed: {type(error).__name__}: {error}",
                "report this as a zerokit bug, with this table",
            )
        ]


def run_checks(ctx: Context, checks: Iterable[Check] = CHECKS) -> list[CheckResult]:
    return [result for check in checks for result in run_check(check, ctx)]
