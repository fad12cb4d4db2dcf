"""LoRA (peft) and last-layers fine-tuning under ZeRO-2 and ZeRO-3, 2 ranks: adapters saved, `--merge`, generate.

The base is a small GPT-2 (tied input and output embeddings) saved with save_pretrained.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from tests.conftest import run_zerokit
from zerokit.sources.embedded import GPT2_SIZE, prepare_embedded


@pytest.fixture(scope="module")
def base(tmp_path_factory) -> tuple[Path, Path]:
    """(base model folder, corpus folder)."""
    from transformers import AutoTokenizer, GPT2Config, GPT2LMHeadModel

    folder = tmp_path_factory.mktemp("lora")
    files, tokenizer_dir = prepare_embedded(folder / "embedded")
    tokenizer = AutoTokenizer.from_pretrained(tokenizer_dir)
    torch.manual_seed(0)
    ids = {"bos_token_id": tokenizer.eos_token_id, "eos_token_id": tokenizer.eos_token_id}
    model = GPT2LMHeadModel(GPT2Config(vocab_size=len(tokenizer), **ids, **GPT2_SIZE))
    model.save_pretrained(folder / "base")
    tokenizer.save_pretrained(folder / "base")
    return folder / "base", files["train"].parent


def train(base: Path, corpus: Path, output: Path, config: str, env, *extra: str):
    argv = ["train", "--model", str(base), "--dataset", str(corpus), "--config", config, "--nproc-per-node", "2"]
    argv += ["--output-dir", str(output), "--max_steps", "8", "--learning_rate", "1e-2", "--block-size", "64"]
    return run_zerokit([*argv, "--per_device_train_batch_size", "8", *extra], env)


@pytest.mark.parametrize("config", ["zero2", "zero3"])
def test_lora_saves_an_adapter_and_merges(tmp_path: Path, zk_env, base, config: str):
    base_dir, corpus = base
    output = tmp_path / "lora"
    result = train(base_dir, corpus, output, config, zk_env, "--lora", "r=4,alpha=8", "--merge")
    assert result.returncode == 0, result.stderr[-3000:]
    # r=4 on c_attn (128->384), attention c_proj (128->128), MLP c_proj (512->128), 2 layers
    assert "zerokit: training 11,264 of" in result.stdout

    adapter = json.loads((output / "adapter_config.json").read_text())
    assert adapter["r"] == 4 and set(adapter["target_modules"]) == {"c_attn", "c_proj"}
    weights = load_file(output / "adapter_model.safetensors")
    assert weights and all("lora_" in name for name in weights)
    assert any(w.abs().sum() > 0 for name, w in weights.items() if "lora_B" in name)  # trained (B starts at 0)

    from transformers import AutoModelForCausalLM

    merged = AutoModelForCausalLM.from_pretrained(output / "merged")
    original = AutoModelForCausalLM.from_pretrained(base_dir)
    name = "transformer.h.0.attn.c_attn.weight"
    assert not torch.equal(merged.state_dict()[name], original.state_dict()[name])
    assert torch.equal(merged.state_dict()["transformer.wte.weight"], original.state_dict()["transformer.wte.weight"])

    if config == "zero2":
        return  # the adapter's files are the same under both: generate reads zero3's once, below
    # generate from the adapter on its base (named in adapter_config.json) equals the merged model's.
    prompts = ["three plus four is", "the quick foxes"]
    outputs = {}
    for model in (output, output / "merged"):
        samples = tmp_path / f"{model.name}.jsonl"
        argv = ["generate", str(model), "--output", str(samples), "--max-new-tokens", "6", "--batch-size", "1"]
        result = run_zerokit(argv + [arg for p in prompts for arg in ("--prompt", p)], zk_env)
        assert result.returncode == 0, result.stderr[-3000:]
        outputs[model.name] = [json.loads(line) for line in samples.read_text().splitlines()]
    assert [row["prompt"] for row in outputs["lora"]] == prompts
    assert outputs["lora"] == outputs["merged"]


def test_train_last_layers_under_zero3_changes_only_the_last_layer(tmp_path: Path, zk_env, base):
    base_dir, corpus = base
    output = tmp_path / "last"
    result = train(base_dir, corpus, output, "zero3", zk_env, "--train-last-layers", "1")
    assert result.returncode == 0, result.stderr[-3000:]
    trained, original = load_file(output / "model.safetensors"), load_file(base_dir / "model.safetensors")
    for name, tensor in original.items():
        changed = not torch.equal(trained[name], tensor)
        assert changed == name.startswith(("transformer.h.1.", "transformer.ln_f.")), name
