"""A run's DeepSpeed config is read once, into DeepSpeedSettings (zerokit.train.ds_settings); train asks the record."""

from __future__ import annotations

import ast
import json
from pathlib import Path

from zerokit.train.ds_settings import AUTO, DeepSpeedSettings
from zerokit.train.options import TrainFlags

TRAIN = Path(__file__).resolve().parents[2] / "src" / "zerokit" / "train"


def test_a_bundled_config_reads_as_its_record():
    settings = TrainFlags(config="zero2").ds_settings
    assert settings is not None and settings.path.name == "zero2.json" and settings.path.is_absolute()
    assert settings.zero_stage == 2 and settings.optimizer == "AdamW"
    assert settings.offload_optimizer == "none" and settings.autotp_size == 1
    assert settings.train_batch_size == settings.train_micro_batch_size_per_gpu == AUTO
    assert settings.fixed_global_batch is None
    assert dict(settings.bucket_sizes) == {"reduce_bucket_size": 500_000_000, "allgather_bucket_size": 500_000_000}
    assert settings.sixteen_bit(bf16=True, fp16=False) and not settings.sixteen_bit(bf16=False, fp16=False)
    assert TrainFlags(config="none").ds_settings is None and TrainFlags(config="none").ds_config is None


def test_what_a_file_leaves_out_reads_as_deepspeeds_defaults_and_a_section_not_an_object_as_empty(tmp_path: Path):
    path = tmp_path / "ds.json"
    path.write_text(json.dumps({"train_batch_size": 64, "zero_optimization": "two", "bf16": {"enabled": True}}))
    settings = DeepSpeedSettings.read(path)
    assert settings.fixed_global_batch == 64 and settings.gradient_accumulation_steps == AUTO
    assert settings.zero_stage == 0 and settings.offload_param == "none"
    assert settings.optimizer is None and dict(settings.bucket_sizes) == {}
    assert settings.contiguous_gradients and not settings.overlap_comm and settings.compile_passes == ()
    assert settings.sixteen_bit(bf16=False, fp16=False)  # the file's true, whatever the flags say


def test_the_record_hands_out_copies_and_keeps_the_file_as_read(tmp_path: Path):
    path = tmp_path / "ds.json"
    path.write_text(json.dumps({"zero_optimization": {"stage": 1}}))
    settings = DeepSpeedSettings.read(path)
    changed = settings.as_dict()
    changed["zero_optimization"]["stage"] = 3
    assert settings.raw["zero_optimization"] == {"stage": 1}


def test_train_reads_the_config_file_in_one_module():
    """Only ds_settings calls the reader (zerokit.sources.ds_configs.read_ds_config); the rest ask the record."""
    readers = sorted(
        str(path.relative_to(TRAIN))
        for path in TRAIN.rglob("*.py")
        for node in ast.walk(ast.parse(path.read_text()))
        if isinstance(node, ast.ImportFrom)
        and node.module == "zerokit.sources.ds_configs"
        and any(alias.name in ("read_ds_config", "resolve_ds_config") for alias in node.names)
    )
    assert readers == ["ds_settings.py"]
