"""Moved to zerokit.container (a lower layer: doctor reads it too); kept until launch.environment imports it there."""

from zerokit.container import PASS_JOB_ENV, hidden_job

__all__ = ["PASS_JOB_ENV", "hidden_job"]
