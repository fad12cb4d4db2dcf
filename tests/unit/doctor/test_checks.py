"""The check list and its runner; results and contexts are immutable."""

from __future__ import annotations

import dataclasses

import pytest

from tests.unit.doctor.conftest import context
from zerokit.doctor import CHECKS, CheckResult, check_id, run_checks
from zerokit.doctor.checks import run_check


def test_a_crashing_check_becomes_a_fail_and_the_others_still_run():
    def check_broken(ctx):
        raise KeyError("oops")

    def check_fine(ctx):
        return [CheckResult("fine", "ok", "yes")]

    results = run_checks(context(), [check_broken, check_fine])
    assert [(r.name, r.status) for r in results] == [("broken", "fail"), ("fine", "ok")]
    assert results[0].detail == "the check itself crashed: KeyError: 'oops'"
    assert "zerokit bug" in results[0].fix


def test_run_check_returns_a_list():
    assert run_check(lambda ctx: iter([CheckResult("x", "skip", "")]), context()) == [CheckResult("x", "skip", "")]


def test_checks_are_an_ordered_tuple_of_functions():
    assert isinstance(CHECKS, tuple)
    assert [check_id(c) for c in CHECKS][:2] == ["python", "packages"]


def test_status_is_validated():
    with pytest.raises(ValueError, match="status must be one of"):
        CheckResult("x", "fine", "")


def test_results_and_context_are_frozen():
    with pytest.raises(dataclasses.FrozenInstanceError):
        CheckResult("x", "ok", "").status = "fail"
    ctx = context({"A": "1"})
    with pytest.raises(TypeError):
        ctx.environ["A"] = "2"  # a read-only copy
    source = {"A": "1"}
    ctx = context(source)
    source["A"] = "2"
    assert ctx.environ["A"] == "1"
