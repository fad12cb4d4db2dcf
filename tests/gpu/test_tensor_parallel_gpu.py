"""Tensor parallelism on 2 GPUs in bf16 (issue 29): train --tp-size 2 against --tp-size 1 on one GPU, and
generate's AutoTP against one process. What tests/e2e/test_tensor_parallel.py and test_generate_scale.py prove
on CPU gloo ranks, here over NCCL with bf16 weights. bf16 rounds differently when a layer's matmul is split, so
the losses agree loosely (2e-2 relative) where fp32 on CPU agreed to 1e-4; generate compares greedy tokens of
a model trained first, so its argmax is not a tie of random logits. Needs 2 GPUs or more."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.conftest import isolated_env, logged_losses, run_zerokit
from tests.e2e.test_tensor_parallel import TINY_LLAMA

torch = pytest.importorskip("torch")

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(torch.cuda.device_count() < 2, reason="needs 2 NVIDIA GPUs: torch sees fewer"),
]
STEPS = 20


def train(output: Path, ranks: int, tp: int, env: dict[str, str]) -> None:
    argv = ["train", "--config", "zero2", "--nproc-per-node", str(ranks), "--tp-size", str(tp), "--output-dir",
            str(output), "--model-type", "llama", "--config-overrides", TINY_LLAMA, "--block-size", "64",
            "--max_steps", str(STEPS), "--per_device_train_batch_size", "8", "--learning_rate", "3e-3",
            "--logging_steps", "1", "--seed", "7", "--bf16", "true", "--save_strategy", "no"]  # fmt: skip
    result = run_zerokit(argv, env)
    assert result.returncode == 0, result.stderr[-3000:]


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> tuple[Path, dict[str, str]]:
    root = tmp_path_factory.mktemp("tp-gpu")
    env = isolated_env(root)
    train(root / "tp1", 1, 1, env)
    train(root / "tp2", 2, 2, env)
    return root, env


def test_tp2_on_2_gpus_follows_tp1_on_one(runs):
    root, _ = runs
    got, want = logged_losses(root / "tp2"), logged_losses(root / "tp1")
    assert len(got) == len(want) == STEPS and got[-1] < 0.8 * got[0]
    assert got == pytest.approx(want, rel=2e-2)
    record = json.loads((root / "tp2" / "zerokit-run.json").read_text())
    assert record["parallelism"] == {"tp_size": 2, "dp_size": 1}


def test_generate_with_tp2_on_2_gpus_gives_the_one_gpu_tokens(runs):
    root, env = runs
    rows = root / "rows.jsonl"
    rows.write_text("".join(json.dumps({"q": f"what is {n} plus 1"}) + "\n" for n in range(8)))
    args = ["--jsonl", str(rows), "--template", "{q}", "--max-new-tokens", "8", "--dtype", "bf16"]
    one = run_zerokit(["generate", str(root / "tp1"), *args, "--output", str(root / "one.jsonl")], env)
    assert one.returncode == 0, one.stderr[-3000:]
    launch = ["launch", "--nproc-per-node", "2", "--no-preflight"]
    two = run_zerokit([*launch, "generate", str(root / "tp1"), *args, "--tp-size", "2", "--output",
                       str(root / "two.jsonl")], env)  # fmt: skip
    assert two.returncode == 0, two.stderr[-3000:]
    assert "on 2 rank(s), tp 2" in two.stderr
    completions = [[json.loads(line)["completion"] for line in (root / name).read_text().splitlines()]
                   for name in ("one.jsonl", "two.jsonl")]  # fmt: skip
    same = sum(a == b for a, b in zip(*completions, strict=True))
    assert same >= 6, completions  # bf16: a near-tie may flip one token of a row
