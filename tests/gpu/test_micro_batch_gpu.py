"""`--micro-batch auto` on a GPU: the probe runs out of memory for real, halves, frees what it took, and the run
trains with what it chose. Not run on CPU ranks (no probe there: tests/unit/test_micro_batch.py and
tests/e2e/test_hf_meanings.py cover the estimate alone); `pytest -m gpu` in a CUDA environment (tests/gpu/proof)."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import pytest

from tests.conftest import isolated_env, run_zerokit

torch = pytest.importorskip("torch")

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs an NVIDIA GPU: torch.cuda.is_available() is False"),
]


def test_the_probe_halves_after_a_real_out_of_memory_and_frees_it():
    """A GPT-2 in bf16 under a memory cap of 8 GiB (torch's per-process fraction: the allocator raises
    torch.cuda.OutOfMemoryError beyond it), probed from 256 samples of 512 tokens down."""
    from transformers import GPT2Config, GPT2LMHeadModel

    from zerokit.train.sizing.memory_need import Activations
    from zerokit.train.sizing.micro_batch import halving
    from zerokit.train.sizing.micro_probe import probe

    device = torch.device("cuda", torch.cuda.current_device())
    total = torch.cuda.mem_get_info(device)[1]
    cap = 8 * 2**30
    torch.cuda.set_per_process_memory_fraction(cap / total, device)
    try:
        config = GPT2Config(n_layer=6, n_embd=768, n_head=12, n_positions=512)
        model = GPT2LMHeadModel(config).to(device, torch.bfloat16)
        # cuBLAS takes a workspace per thread and stream at its first matmul and keeps it for the process (the
        # forward's thread and the backward's): taken before `before`, it is not counted as a probe's leftover.
        ids = torch.zeros((1, 8), dtype=torch.long, device=device)
        model(input_ids=ids, labels=ids).loss.backward()
        model.zero_grad(set_to_none=True)
        before = torch.cuda.memory_allocated(device)
        args = SimpleNamespace(device=device, gradient_checkpointing=False, deepspeed="zero2", bf16=True, fp16=False)
        shape = Activations(6, 768, 12, 3072, config.vocab_size, 512, 2)
        choice = halving([256, 128, 64, 32, 16, 8, 4, 2, 1], lambda size: probe(model, size, shape, args, 0, cap))
        assert choice.micro is not None and choice.too_big, choice  # 256 x 512 tokens cannot fit in 8 GiB
        assert choice.micro < 256 and choice.too_big[-1] == 2 * choice.micro
        assert torch.cuda.memory_allocated(device) == before  # every probe's tensors freed, gradients too
        ids = torch.randint(0, config.vocab_size, (choice.micro, 512), device=device)
        model(input_ids=ids, labels=ids).loss.backward()  # what it chose runs again
        assert torch.cuda.max_memory_allocated(device) <= cap
    finally:
        torch.cuda.set_per_process_memory_fraction(1.0, device)
        torch.cuda.empty_cache()


def test_train_chooses_by_probing_and_trains_with_it(tmp_path: Path):
    """A fresh GPT-2 of 4 layers at 1024 tokens, ZeRO-2, bf16, 3 steps: the line, the record, DeepSpeed's config and
    the run's peak agree with the choice."""
    output = tmp_path / "run"
    argv = ["train", "--config", "zero2", "--model-type", "gpt2", "--config-overrides", "n_layer=4", "--output-dir",
            str(output), "--max_steps", "3", "--save_strategy", "no", "--micro-batch", "auto"]  # fmt: skip
    result = run_zerokit(argv, isolated_env(tmp_path))
    assert result.returncode == 0, result.stderr[-3000:]
    record = json.loads((output / "zerokit-run.json").read_text())
    chosen = record["micro_batch"]
    assert chosen["how"] == "probe" and chosen["chosen"] >= 1
    assert f"zerokit: micro-batch {chosen['chosen']} per rank (--micro-batch auto: a forward and backward" in (
        result.stdout
    )
    assert record["batch"]["micro"] == chosen["chosen"]
    assert record["deepspeed"]["resolved"]["train_micro_batch_size_per_gpu"] == chosen["chosen"]
    peak = json.loads((output / "train_results.json").read_text())["peak_gpu_memory_bytes"]
    assert peak <= torch.cuda.mem_get_info()[1]  # trained without running out
