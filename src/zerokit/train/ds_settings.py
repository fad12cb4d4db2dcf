"""A run's DeepSpeed config, read once: `DeepSpeedSettings`, what every part of train asks of it.

train reads the file here and nowhere else (zerokit.sources.ds_configs finds it and parses its JSON); the run's
options carry the record (`TrainFlags.ds_settings`), as launch's `Job` carries the job's argv. Its values are the
file's as written, "auto" included (the Trainer fills those from its flags). The record is made before DeepSpeed's
own check of the file (zerokit.sources.ds_config_check, which names a section that is not a JSON object), so such a
section reads here as empty rather than failing first with a traceback. `raw` is the whole file, read-only, for what
passes on untouched: the `--deepspeed` value (zerokit.train.options.ds_config_argument) and the run record's copy.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType
from typing import Any

from zerokit.sources.ds_configs import read_ds_config

AUTO = "auto"  # a value the HF Trainer fills from its flags
BUCKETS = ("reduce_bucket_size", "allgather_bucket_size")  # zero_optimization's, in elements


def section(config: Any, name: str) -> dict[str, Any]:
    """config[name] where it is a JSON object, else empty."""
    value = config.get(name) if isinstance(config, dict) else None
    return value if isinstance(value, dict) else {}


@dataclass(frozen=True)
class DeepSpeedSettings:
    """What train reads of one DeepSpeed config file (values as the file gives them)."""

    path: Path  # the file, resolved
    raw: MappingProxyType[str, Any]  # the whole file, read-only (as_dict: a copy to change)
    zero_stage: int  # zero_optimization.stage (0 where the file names none)
    train_batch_size: int | str  # each batch key: a number, or "auto" where the file says so or leaves it out
    train_micro_batch_size_per_gpu: int | str
    gradient_accumulation_steps: int | str
    bucket_sizes: MappingProxyType[str, int | float | str]  # those of BUCKETS the file sets
    contiguous_gradients: bool  # zero_optimization's (DeepSpeed's defaults where absent: True, False)
    overlap_comm: bool
    offload_optimizer: str  # zero_optimization.offload_optimizer.device ("none" where absent)
    offload_param: str  # zero_optimization.offload_param.device ("none" where absent)
    autotp_size: int  # tensor_parallel.autotp_size (1 where absent)
    optimizer: str | None  # optimizer.type (None: the file names none, the Trainer's is used)
    bf16: bool | str  # bf16.enabled: true, false or "auto" (false where absent)
    fp16: bool | str  # fp16.enabled, the same
    compile_passes: tuple[str, ...]  # compile.passes, deepcompile's (empty where absent)

    @classmethod
    def read(cls, found: Path) -> DeepSpeedSettings:
        """The file at found (as zerokit.sources.ds_configs.find_ds_config gives it: said so in its errors)."""
        return cls.of(found.resolve(), read_ds_config(found))

    @classmethod
    def of(cls, path: Path, config: dict[str, Any]) -> DeepSpeedSettings:
        zero = section(config, "zero_optimization")
        optimizer = section(config, "optimizer")
        passes = section(config, "compile").get("passes")
        return cls(
            path=path,
            raw=MappingProxyType(config),
            zero_stage=zero.get("stage", 0),
            train_batch_size=config.get("train_batch_size", AUTO),
            train_micro_batch_size_per_gpu=config.get("train_micro_batch_size_per_gpu", AUTO),
            gradient_accumulation_steps=config.get("gradient_accumulation_steps", AUTO),
            bucket_sizes=MappingProxyType({key: zero[key] for key in BUCKETS if key in zero}),
            contiguous_gradients=zero.get("contiguous_gradients", True),
            overlap_comm=zero.get("overlap_comm", False),
            offload_optimizer=section(zero, "offload_optimizer").get("device", "none"),
            offload_param=section(zero, "offload_param").get("device", "none"),
            autotp_size=section(config, "tensor_parallel").get("autotp_size", 1),
            optimizer=str(optimizer["type"]) if "type" in optimizer else None,
            bf16=section(config, "bf16").get("enabled", False),
            fp16=section(config, "fp16").get("enabled", False),
            compile_passes=tuple(passes) if isinstance(passes, list) else (),
        )

    @property
    def fixed_global_batch(self) -> int | None:
        """train_batch_size where it is a number (None where "auto" or absent)."""
        return None if self.train_batch_size == AUTO else int(self.train_batch_size)

    def sixteen_bit(self, bf16: bool, fp16: bool) -> bool:
        """Whether DeepSpeed trains in 16 bits, given HF's --bf16 and --fp16 (which fill an "auto")."""

        def enabled(value: bool | str, flag: bool) -> bool:
            return flag if value == AUTO else bool(value)

        return enabled(self.bf16, bf16) or enabled(self.fp16, fp16)

    def as_dict(self) -> dict[str, Any]:
        """The whole file, a copy the caller may change."""
        return copy.deepcopy(dict(self.raw))
