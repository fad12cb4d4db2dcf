"""train's speed switches: the chunked cross-entropy is HF's loss without the logits, and a switch the run cannot
use is refused in one line before torch starts."""

from __future__ import annotations

import json

import pytest
import torch

from zerokit.foundations.errors import UserError
from zerokit.train.cli import parse
from zerokit.train.model import fused_loss
from zerokit.train.model.switches import set_dropout


def tiny_gpt2():
    from transformers import GPT2Config, GPT2LMHeadModel

    torch.manual_seed(0)
    config = GPT2Config(vocab_size=97, n_layer=2, n_embd=32, n_head=2, n_positions=16)
    set_dropout(config, 0.0)  # the two forwards must see the same network
    return GPT2LMHeadModel(config)


@pytest.mark.parametrize("num_items", [None, 23])
def test_the_chunked_loss_and_its_gradients_are_hfs(monkeypatch, num_items):
    """Several chunks (a few rows each), ignored labels, and the Trainer's num_items_in_batch (gradient
    accumulation's sum over the tokens of every micro-batch)."""
    monkeypatch.setattr(fused_loss, "CHUNK_BYTES", 5 * 4 * 97)  # 5 rows a chunk
    ids = torch.randint(0, 97, (3, 16), generator=torch.Generator().manual_seed(1))
    labels = ids.clone()
    labels[0, :4] = -100
    extra = {} if num_items is None else {"num_items_in_batch": torch.tensor(num_items)}
    results = []
    for kind in ("hf", "chunked"):
        model = tiny_gpt2()
        fused_loss.use_fused_loss(model, kind)
        output = model(input_ids=ids, labels=labels, **extra)
        output.loss.backward()
        results.append((output.loss.detach(), {n: p.grad.clone() for n, p in model.named_parameters()}))
        assert (output.logits is None) == (kind == "chunked")  # the chunked loss builds no logits
    (hf_loss, hf_grads), (loss, grads) = results
    assert loss.item() == pytest.approx(hf_loss.item(), rel=1e-5)
    for name, grad in grads.items():
        torch.testing.assert_close(grad, hf_grads[name], rtol=1e-4, atol=1e-6, msg=name)


def test_evaluation_and_generation_keep_the_models_own_forward():
    model = tiny_gpt2()
    fused_loss.use_fused_loss(model, "chunked")
    model.eval()
    ids = torch.randint(0, 97, (1, 8))
    assert model(input_ids=ids, labels=ids).logits.shape == (1, 8, 97)  # evaluation: logits, as HF's
    assert model.generate(ids, max_new_tokens=2, do_sample=False).shape == (1, 10)


def test_set_dropout_sets_every_rate_of_the_config():
    from transformers import GPT2Config

    config = GPT2Config()
    assert set(set_dropout(config, 0.0)) >= {"resid_pdrop", "embd_pdrop", "attn_pdrop"}
    assert config.resid_pdrop == config.embd_pdrop == config.attn_pdrop == 0.0


@pytest.mark.parametrize(
    ("argv", "said"),
    [
        (["--config", "zero3", "--cross-entropy", "chunked"], "reads the output head's whole weight, which ZeRO-3"),
        (["--cross-entropy", "chunked", "--model-type", "llama", "--tp-size", "2"], "takes the model whole"),
        (["--attn-implementation", "flash_attention_2"], "needs the flash_attn package, which this environment"),
        (["--attn-implementation", "flash"], "'flash' is not one of eager, sdpa"),
        (["--compile", "deepcompile", "--config", "none"], "give a DeepSpeed --config, or --compile torch"),
        (["--compile", "deepcompile", "--config", "ZERO0"], "is ZeRO-0: use a ZeRO-1/2/3 config, or --compile torch"),
        (["--dropout", "1.5"], "is not a probability: give one from 0 to 1"),
    ],
)
def test_a_switch_the_run_cannot_use_is_refused_in_one_line(argv, said, monkeypatch, tmp_path):
    import importlib.util

    zero0 = tmp_path / "zero0.json"
    zero0.write_text(json.dumps({"zero_optimization": {"stage": 0}, "train_micro_batch_size_per_gpu": "auto"}))
    argv = [str(zero0) if word == "ZERO0" else word for word in argv]

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "flash_attn" else real(name, *a))
    with pytest.raises(UserError) as refused:
        parse(argv, environ={})
    assert said in str(refused.value) and "\n" not in str(refused.value)


def test_deepcompile_at_zero_0_runs_its_parallel_passes(tmp_path):
    """autotp and autosp run at any ZeRO stage (only DeepSpeed's ZeRO passes need 1-3): not refused at ZeRO-0."""
    config = tmp_path / "autotp.json"
    passes = {"compile": {"deepcompile": True, "passes": ["autotp"]}, "train_micro_batch_size_per_gpu": "auto"}
    config.write_text(json.dumps({"zero_optimization": {"stage": 0}, **passes}))
    assert parse(["--compile", "deepcompile", "--config", str(config)], environ={})[0].compile == "deepcompile"


def test_the_switches_reach_the_trainer_and_deepspeed(tmp_path):
    """--compile sets HF's torch_compile; deepcompile also DeepSpeed's compile section (the user's file unchanged)."""
    import base64

    from zerokit.train.options import TrainFlags, ds_config_argument

    zero2 = TrainFlags(config="zero2").ds_settings
    value = ds_config_argument(zero2, deepcompile=True)
    assert json.loads(base64.urlsafe_b64decode(value))["compile"] == {"deepcompile": True}
    assert ds_config_argument(zero2) == str(zero2.path)
    from zerokit.train.run import training_arguments

    options, flags = parse(["--compile", "torch", "--config", "none", "--output-dir", str(tmp_path / "o")], environ={})
    notes: list[str] = []
    assert training_arguments(options, flags, None, False, notes).torch_compile
    assert any("--dataloader_drop_last" in note for note in notes)  # a short batch's recompile, said
    notes.clear()
    # HF's NaN/inf filter reads each step's loss on the host: off unless asked for (train's guard stops a NaN loss)
    assert not training_arguments(options, flags, None, False, []).logging_nan_inf_filter
    asked = training_arguments(options, [*flags, "--logging_nan_inf_filter", "true"], None, False, [])
    assert asked.logging_nan_inf_filter
    assert training_arguments(options, [*flags, "--dataloader_drop_last", "true"], None, False, notes).torch_compile
    assert notes == []
