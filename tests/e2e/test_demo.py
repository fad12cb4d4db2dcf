"""`make demo`'s job: 2 CPU ranks, ZeRO-3, embedded default; it must clearly learn and compile nothing.

It is also the suite's 2-rank ZeRO-3 train-save-reload run (test_train_zero.py runs the other configs).
"""

from __future__ import annotations

import json
import math
from pathlib import Path

from tests.conftest import run_zerokit


def test_demo_halves_perplexity_and_writes_a_sample(tmp_path: Path, zk_env):
    out = tmp_path / "demo"
    # 100 steps of the demo's 300: the same job and every file it writes, a third of the steps.
    result = run_zerokit(["demo", "--output", str(out), "--max-steps", "100"], zk_env, timeout=900)
    assert result.returncode == 0, result.stderr[-3000:]

    results = json.loads((out / "eval_results.json").read_text())
    history = json.loads((out / "trainer_state.json").read_text())["log_history"]
    evals = [entry for entry in history if "eval_loss" in entry]
    assert evals[0]["step"] == 0  # the untrained model, on the same eval split
    untrained = math.exp(evals[0]["eval_loss"])
    assert results["perplexity"] <= untrained / 2, (results["perplexity"], untrained)

    # The saved folder is a whole transformers model (the samples come from reloading it; ZeRO-3 gathered it).
    for name in ("model.safetensors", "config.json", "tokenizer.json", "train_results.json", "all_results.json"):
        assert (out / name).is_file(), name
    assert results["perplexity"] == math.exp(results["eval_loss"])
    samples = (out / "samples.txt").read_text().splitlines()
    assert len(samples) == 4 and samples[0].startswith("three plus four is")
    assert f"eval perplexity: {results['perplexity']:.2f}" in result.stdout
    assert not any(Path(zk_env["TORCH_EXTENSIONS_DIR"]).glob("**/*.so")), "an op was JIT-compiled"


def test_demo_refuses_to_replace_an_earlier_demo_unless_asked(tmp_path: Path, zk_env):
    out = tmp_path / "demo"
    out.mkdir()
    (out / "eval_results.json").write_text("{}")
    result = run_zerokit(["demo", "--output", str(out)], zk_env)
    assert result.returncode == 2
    assert "--overwrite" in result.stderr
    assert (out / "eval_results.json").read_text() == "{}"
