"""Real 2-rank DeepSpeed training on CPU with each bundled ZeRO config, on the embedded default."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.conftest import logged_losses, run_zerokit

STEPS = 60


# zero3 itself is the demo's config: tests/e2e/test_demo.py trains, saves and reloads it.
@pytest.mark.parametrize("config", ["zero2", "zero3-offload"])
def test_two_ranks_train_save_and_reload(tmp_path: Path, zk_env, config: str):
    out = tmp_path / "run"
    result = run_zerokit(
        [
            "train",
            "--config",
            config,
            "--nproc-per-node",
            "2",
            "--output-dir",
            str(out),
            "--max_steps",
            str(STEPS),
            "--logging_steps",
            "10",
        ],
        zk_env,
    )
    assert result.returncode == 0, result.stderr[-3000:]

    losses = logged_losses(out)
    assert len(losses) == STEPS // 10
    assert losses[-1] < 0.6 * losses[0], losses

    for name in (
        "model.safetensors",
        "config.json",
        "tokenizer.json",
        "trainer_state.json",
        "train_results.json",
        "eval_results.json",
        "all_results.json",
    ):
        assert (out / name).is_file(), name
    results = json.loads((out / "eval_results.json").read_text())
    assert results["perplexity"] == pytest.approx(2.718281828 ** results["eval_loss"], rel=1e-6)

    # The saved folder is a normal transformers model: it reloads and generates.
    from transformers import AutoModelForCausalLM, AutoTokenizer

    model = AutoModelForCausalLM.from_pretrained(out)
    tokenizer = AutoTokenizer.from_pretrained(out)
    ids = tokenizer("two plus two is", return_tensors="pt").input_ids
    generated = model.generate(ids, max_new_tokens=5, do_sample=False, pad_token_id=tokenizer.pad_token_id)
    assert generated.shape[1] > ids.shape[1]
    # No op was JIT-compiled: they are all prebuilt.
    assert not any(Path(zk_env["TORCH_EXTENSIONS_DIR"]).glob("**/*.so"))
