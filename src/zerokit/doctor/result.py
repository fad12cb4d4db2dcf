"""What a check returns: one row of the doctor's table."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Literal

Status = Literal["ok", "warn", "fail", "skip"]
STATUSES: tuple[Status, ...] = ("ok", "warn", "fail", "skip")


@dataclass(frozen=True)
class CheckResult:
    """One finding. `fix` says what to do about a warn or fail; it is empty when there is nothing to do."""

    name: str
    status: Status
    detail: str
    fix: str = ""

    def __post_init__(self) -> None:
        if self.status not in STATUSES:
            raise ValueError(f"status must be one of {STATUSES}, got {self.status!r}")

    def as_dict(self) -> dict[str, str]:
        return asdict(self)


def ok(name: str, detail: str) -> CheckResult:
    return CheckResult(name, "ok", detail)


def warn(name: str, detail: str, fix: str) -> CheckResult:
    return CheckResult(name, "warn", detail, fix)


def fail(name: str, detail: str, fix: str) -> CheckResult:
    return CheckResult(name, "fail", detail, fix)


def skip(name: str, detail: str) -> CheckResult:
    return CheckResult(name, "skip", detail)
