"""Fixtures the e2e modules share: one isolated environment and one folder of runs per module."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.conftest import isolated_env


@pytest.fixture(scope="module")
def env(tmp_path_factory) -> dict[str, str]:
    """An environment of the module's own (caches, HF_HOME) for its trainings, shared by its tests."""
    return isolated_env(tmp_path_factory.mktemp("env"))


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> Path:
    """The folder the module's runs write into, shared by its tests (a run one test makes, another reads)."""
    return tmp_path_factory.mktemp("runs")
