"""Offline nodes: with an empty cache, `train` with a Hub name fails at once, in one line naming `prepare`.

HF_HUB_OFFLINE=1 is train's default: the test also runs with the variable unset. There is no Hub
here, so this is the path that runs; staging itself (`prepare --model`) needs the network.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.conftest import run_zerokit


@pytest.mark.parametrize("offline_variable", ["1", None], ids=["HF_HUB_OFFLINE=1", "unset"])
def test_a_model_missing_from_the_cache_fails_in_one_line_naming_prepare(tmp_path: Path, zk_env, offline_variable):
    env = {k: v for k, v in zk_env.items() if k not in ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE")}
    if offline_variable:
        env["HF_HUB_OFFLINE"] = offline_variable
    result = run_zerokit(["train", "--model", "some/name", "--output-dir", str(tmp_path / "run")], env, timeout=120)
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("error: model some/name: not in the cache")
    assert "`zerokit prepare --model some/name`" in lines[0] and env["HF_HOME"] in lines[0]
    assert not (tmp_path / "run").exists()


def test_a_hub_dataset_missing_from_the_cache_names_prepare(tmp_path: Path, zk_env):
    result = run_zerokit(["train", "--dataset", "some/corpus", "--output-dir", str(tmp_path / "run")], zk_env)
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "`zerokit prepare --dataset some/corpus`" in lines[0], result.stderr


@pytest.mark.parametrize("what", ["--model", "--tokenizer", "--metric"])
def test_prepare_refuses_to_stage_offline(zk_env, what: str):
    result = run_zerokit(["prepare", what, "some/name"], zk_env)
    assert result.returncode == 2
    assert result.stderr.strip() == (
        "error: prepare downloads, but HF_HUB_OFFLINE=1: run it where there is network, with them unset"
    )
