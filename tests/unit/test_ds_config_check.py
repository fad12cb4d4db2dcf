"""A user's DeepSpeed config checked at the door against the installed DeepSpeed's own keys and models
(zerokit.sources.ds_config_check): one line naming the file, the key's path and the fix, before any rank starts."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from zerokit.foundations.errors import UserError
from zerokit.foundations.paths import CONFIGS_DIR
from zerokit.sources.ds_config_check import check_ds_config, config_problems
from zerokit.sources.ds_config_keys import known_keys
from zerokit.sources.ds_configs import read_ds_config
from zerokit.sources.hf_autos import hf_filled_keys

pytest.importorskip("deepspeed")

ZERO2 = {"zero_optimization": {"stage": 2}, "train_micro_batch_size_per_gpu": "auto"}


def refusal(tmp_path: Path, config: dict) -> str:
    path = tmp_path / "ds.json"
    path.write_text(json.dumps(config))
    with pytest.raises(UserError) as error:
        check_ds_config(path)
    message = str(error.value)
    assert "\n" not in message and message.startswith(f"DeepSpeed config {path}: "), message
    return message.removeprefix(f"DeepSpeed config {path}: ")


@pytest.mark.parametrize("config", sorted(CONFIGS_DIR.glob("*.json")), ids=lambda path: path.stem)
def test_bundled_configs_pass(tmp_path: Path, config: Path):
    assert config_problems(read_ds_config(config), known_keys(), hf_filled_keys()) == []
    copy = tmp_path / config.name  # outside configs/, as a user's copy: checked at each start
    shutil.copy(config, copy)
    check_ds_config(copy)


def test_a_misspelt_top_level_key_names_the_closest_known_one(tmp_path: Path):
    line = refusal(tmp_path, {"zero_optimisation": {"stage": 2}})
    assert line.startswith("unknown key zero_optimisation: did you mean zero_optimization? (DeepSpeed 0.")
    line = refusal(tmp_path, {**ZERO2, "gradient_cliping": 7.0})  # before, ignored without a word
    assert line.startswith("unknown key gradient_cliping: did you mean gradient_clipping?")


def test_what_deepspeeds_engine_would_assert_on_every_rank_is_named_at_the_door(tmp_path: Path):
    """No batch size at all; an optimizer or scheduler DeepSpeed does not know (its own, or torch's by class name)."""
    line = refusal(tmp_path, {"zero_optimization": {"stage": 2}})
    assert line.startswith("sets neither train_micro_batch_size_per_gpu nor train_batch_size, and DeepSpeed needs one")
    pipeline = {"zero_optimization": {"stage": 1}}  # train --pp-size: its engine sets the batch sizes itself
    assert config_problems(pipeline, known_keys(), hf_filled_keys(), needs_batch=False) == []
    line = refusal(tmp_path, {**ZERO2, "optimizer": {"type": "AdamQ", "params": {"lr": "auto"}}})
    assert line.startswith("optimizer.type 'AdamQ' is neither DeepSpeed's (adagrad, adam, adamw, ")
    line = refusal(tmp_path, {**ZERO2, "scheduler": {"type": "WarmupLRR"}})
    assert line.startswith("scheduler.type 'WarmupLRR' is neither DeepSpeed's (LRRangeTest, ")
    known = {**ZERO2, "optimizer": {"type": "SGD", "params": {"lr": "auto"}}, "scheduler": {"type": "WarmupLR"}}
    assert config_problems(known, known_keys(), hf_filled_keys()) == []
    assert config_problems({**known, "optimizer": {"type": "AdamW"}}, known_keys(), hf_filled_keys()) == []


def test_a_misspelt_nested_key_names_its_path(tmp_path: Path):
    zero = {"stage": 3, "offload_optimiser": {"device": "cpu"}, "offload_param": {"device": "cpu", "pin_memry": 1}}
    line = refusal(tmp_path, {"zero_optimization": zero})
    assert line.startswith(
        "unknown key zero_optimization.offload_optimiser: did you mean zero_optimization.offload_optimizer?"
    )
    assert line.endswith("(and 1 more: zero_optimization.offload_param.pin_memry)")


def test_a_value_of_the_wrong_type_is_named_by_deepspeeds_model_in_zerokits_words(tmp_path: Path):
    """DeepSpeed's pydantic models judge the value; the line says it as a person would (pydantic's own
    `Input should be 0, 1, 2, 3 or 3 (got 4)` named a stage twice)."""
    zero = {"stage": 3, "offload_optimizer": {"device": "gpu"}}
    assert refusal(tmp_path, {"zero_optimization": zero}) == (
        "zero_optimization.offload_optimizer.device: 'gpu' is not allowed: give one of 'none', 'cpu', 'nvme'"
    )
    assert refusal(tmp_path, {"zero_optimization": {"stage": 4}}) == (
        "zero_optimization.stage: 4 is not allowed: give one of 0, 1, 2, 3"
    )
    assert refusal(tmp_path, {"zero_optimization": {"stage": 2}, "bf16": {"enabled": [1]}}) == (
        "bf16.enabled: [1] is not true or false: give true or false"
    )
    assert refusal(tmp_path, {"zero_optimization": {"stage": 2, "reduce_bucket_size": "big"}}) == (
        "zero_optimization.reduce_bucket_size: 'big' is not a whole number: give a whole number"
    )
    assert refusal(tmp_path, {"zero_optimization": 2}) == (
        "zero_optimization must be a JSON object of zero_optimization keys, not a number"
    )


def test_an_optimizer_value_that_is_not_a_number_is_called_that(tmp_path: Path):
    """Not a disagreement with the flags, as HF's check called it once DeepSpeed started."""
    optimizer = {"type": "AdamW", "params": {"lr": "abc", "betas": [0.9, 0.95], "eps": "auto"}}
    assert refusal(tmp_path, {**ZERO2, "optimizer": optimizer}) == (
        "optimizer.params.lr: 'abc' is not a number: give a number, or \"auto\" (the flags')"
    )
    scheduler = {"type": "WarmupLR", "params": {"warmup_num_steps": 10, "warmup_max_lr": ["1e-3"]}}
    assert refusal(tmp_path, {**ZERO2, "scheduler": scheduler}).startswith(
        "scheduler.params.warmup_max_lr: ['1e-3'] is not a list of numbers"
    )


def test_auto_only_where_the_trainer_or_deepspeed_fills_it(tmp_path: Path):
    line = refusal(tmp_path, {**ZERO2, "steps_per_print": "auto"})
    assert line.startswith('steps_per_print is "auto", which neither Hugging Face\'s Trainer nor DeepSpeed fills')
    line = refusal(tmp_path, {**ZERO2, "optimizer": {"type": "AdamW", "params": {"lr": "auto", "amsgrad": "auto"}}})
    assert line.startswith('optimizer.params.amsgrad is "auto"')
    filled = {**ZERO2, "gradient_clipping": "auto", "bf16": {"enabled": "auto"}, "data_types": {}}
    filled["data_types"]["keep_in_fp32_modules"] = "auto"  # DeepSpeed's own default
    path = tmp_path / "filled.json"
    path.write_text(json.dumps(filled))
    check_ds_config(path)


def test_a_key_deepspeed_removed_is_named_with_deepspeeds_reason(tmp_path: Path):
    line = refusal(tmp_path, {**ZERO2, "amp": {"enabled": True}})
    assert line.startswith("amp: NVIDIA Apex AMP integration has been removed. Use DeepSpeed 'fp16', 'bf16'")


def test_the_keys_are_deepspeeds_own():
    """The tree is DeepSpeed's models' fields and aliases and the keys its config class reads, not a list kept here."""
    from deepspeed.runtime.zero.config import DeepSpeedZeroConfig
    from deepspeed.runtime.zero.offload_config import DeepSpeedZeroOffloadOptimizerConfig

    zero = known_keys().keys["zero_optimization"]
    assert zero.model is DeepSpeedZeroConfig
    fields = DeepSpeedZeroConfig.model_fields
    assert set(fields) | {f.alias for f in fields.values() if f.alias} == set(zero.keys)
    assert set(zero.keys["offload_optimizer"].keys) >= set(DeepSpeedZeroOffloadOptimizerConfig.model_fields)
    assert {"train_micro_batch_size_per_gpu", "gradient_clipping", "activation_checkpointing"} <= set(known_keys().keys)
    assert known_keys().keys["optimizer"].keys["params"].any_key  # the optimizer's own arguments
    assert {"optimizer.params.lr", "zero_optimization.stage3_prefetch_bucket_size"} <= hf_filled_keys()


def test_a_config_saved_with_a_byte_order_mark_is_named_with_the_fix(tmp_path: Path):
    """A Windows editor's UTF-8 with BOM: json.load refuses it on every rank ("Unexpected UTF-8 BOM")."""
    import subprocess

    from zerokit.sources.ds_configs import read_ds_config

    path = tmp_path / "zero2.json"
    path.write_bytes(b'\xef\xbb\xbf{"zero_optimization": {"stage": 2}}')
    with pytest.raises(UserError, match=r"starts with a byte-order mark .*: save it as UTF-8 without one") as refused:
        read_ds_config(path)
    fix = str(refused.value).rsplit("(", 1)[1].rstrip(")")  # the sed command the line names, run as given
    subprocess.run(fix, shell=True, check=True)
    assert read_ds_config(path) == {"zero_optimization": {"stage": 2}}
