"""The speed work's GPU paths: the clock that reads CUDA events without waiting, and the chunked cross-entropy in
bf16 on the device. Not run on CPU (no CUDA events there); `pytest -m gpu` in a CUDA environment (tests/gpu/proof).
"""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest

torch = pytest.importorskip("torch")

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs an NVIDIA GPU: torch.cuda.is_available() is False"),
]


def test_the_clock_waits_for_the_device_only_after_the_first_step_and_at_the_end(tmp_path, monkeypatch):
    """Steps of known device time (a sleep kernel) are timed from CUDA events; the host synchronizes twice."""
    from zerokit.train.callbacks import step_clock

    waits = []
    real = torch.cuda.synchronize
    monkeypatch.setattr(torch.cuda, "synchronize", lambda *a: (waits.append(1), real(*a)))
    torch.cuda.init()
    clock = step_clock.StepClock(tmp_path, tokens_per_sample=8)
    args = SimpleNamespace(world_size=1, process_index=0, per_device_train_batch_size=1, gradient_accumulation_steps=1)
    state = SimpleNamespace(num_input_tokens_seen=0)
    clock.on_train_begin(args, state, None)
    for _ in range(6):
        torch.cuda._sleep(50_000_000)  # 50M cycles: tens of milliseconds at a GPU's clock
        clock.on_step_end(args, state, None)
    assert len(waits) == 1  # the first step's, for the wall-clock time to first step
    clock.on_train_end(args, state, None)
    assert len(waits) == 2
    seconds = json.loads((tmp_path / "rank-0.json").read_text())["step_seconds"]
    assert len(seconds) == 5 and all(0.005 < s < 1 for s in seconds), seconds


def test_the_chunked_cross_entropy_in_bf16_on_the_device_is_hfs_within_bf16_rounding():
    from transformers import GPT2Config, GPT2LMHeadModel

    from zerokit.train.model.fused_loss import use_fused_loss

    torch.manual_seed(0)
    config = GPT2Config(vocab_size=50304, n_layer=2, n_embd=256, n_head=4, n_positions=256)
    ids = torch.randint(0, 50304, (4, 256), device="cuda")
    losses = {}
    for kind in ("hf", "chunked"):
        torch.manual_seed(0)
        model = GPT2LMHeadModel(config).to("cuda", torch.bfloat16)
        use_fused_loss(model, kind)
        torch.cuda.reset_peak_memory_stats()
        loss = model(input_ids=ids, labels=ids).loss
        loss.backward()
        losses[kind] = (loss.item(), torch.cuda.max_memory_allocated())
    assert losses["chunked"][0] == pytest.approx(losses["hf"][0], rel=1e-2)
    assert losses["chunked"][1] < losses["hf"][1]  # no full logits, no fp32 copy
