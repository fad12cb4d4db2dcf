"""`doctor`: preflight checks that fail loudly and name the fix.

Each check is a small function of a Context returning CheckResults; CHECKS orders them. Heavy modules
(torch, deepspeed) are imported inside the checks, so a broken install is a result, not a crash, and
importing this package stays cheap.
"""

from zerokit.doctor.checks import CHECKS, check_id, run_checks
from zerokit.doctor.context import Context
from zerokit.doctor.result import CheckResult

__all__ = ["CHECKS", "CheckResult", "Context", "check_id", "run_checks"]
