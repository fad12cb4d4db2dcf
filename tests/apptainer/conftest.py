"""Fixtures of the Apptainer tests (defined in runtime.py, which tests/cluster shares)."""

from tests.apptainer.runtime import apptainer, caller, sif

__all__ = ["apptainer", "caller", "sif"]
