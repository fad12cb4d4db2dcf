"""A mixture-of-experts model under ZeRO-3 on data-parallel gloo ranks: a tiny Mixtral (`--model-type mixtral`,
4 experts, 2 a token), 2 ranks of 4 blocks each against one rank of 8, fp32, 10 steps.

The two ranks see different blocks, so their routers send tokens to different experts: the case in which ZeRO-3
hung on models whose experts were modules of their own (a rank waited for a gather that a rank whose router
skipped that expert never joined). transformers 5 holds a layer's experts as one module (`MixtralExperts`, 3-D
weights), gathered whole whatever the routing; the run must end, and log one rank's losses (issue 59).
"""

from __future__ import annotations

from pathlib import Path

from tests.conftest import logged_losses, run_zerokit

TINY_MIXTRAL = (
    "hidden_size=64,intermediate_size=128,num_hidden_layers=2,num_attention_heads=4,num_key_value_heads=2,"
    "max_position_embeddings=64,num_local_experts=4,num_experts_per_tok=2"
)


def test_a_tiny_mixtral_under_zero3_on_two_ranks_logs_one_ranks_losses(tmp_path: Path, zk_env):
    argv = ["train", "--config", "zero3", "--model-type", "mixtral", "--config-overrides", TINY_MIXTRAL,
            "--block-size", "64", "--max_steps", "10", "--learning_rate", "3e-3", "--logging_steps", "1",
            "--seed", "7", "--save_strategy", "no"]  # fmt: skip
    one = run_zerokit([*argv, "--output-dir", str(tmp_path / "one"), "--per_device_train_batch_size", "8"], zk_env)
    assert one.returncode == 0, one.stderr[-3000:]
    two = run_zerokit(
        [*argv, "--output-dir", str(tmp_path / "two"), "--nproc-per-node", "2", "--per_device_train_batch_size", "4"],
        zk_env,
        timeout=300,
    )
    assert two.returncode == 0, two.stderr[-3000:]
    assert "a fresh mixtral model" in two.stdout
    got, want = logged_losses(tmp_path / "two"), logged_losses(tmp_path / "one")
    assert len(got) == len(want) == 10 and want[-1] < 0.9 * want[0], want
    worst = max(abs(g - w) / w for g, w in zip(got, want, strict=True))
    assert worst < 1e-4, (worst, got, want)
