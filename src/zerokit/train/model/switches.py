"""`train`'s speed switches, each checked in one line before the model is built, then applied where it acts.

- `--compile torch|deepcompile`: HF's `torch_compile` (under DeepSpeed, accelerate calls the engine's
  `compile()`); deepcompile also turns on DeepSpeed's compiler passes (`"compile": {"deepcompile": true}` in
  the config train hands DeepSpeed: zerokit.train.options.ds_config_argument).
- `--attn-implementation NAME`: the attention kernel transformers builds the model with; a kernel whose
  package is missing is refused here, not in the ranks' model loading.
- `--cross-entropy chunked|liger`: a loss that never builds the whole vocabulary's logits
  (zerokit.train.model.fused_loss).
- `--dropout P`: every dropout rate of the model's config (pretraining from scratch usually runs at 0).

None changes what is computed but dropout (a different model) and the loss's rounding; docs/performance.md
gives each one's measured effect.
"""

from __future__ import annotations

import importlib.util
from typing import Any

from zerokit.foundations.errors import UserError
from zerokit.train.ds_settings import DeepSpeedSettings
from zerokit.train.options import TrainFlags

# Attention kernels and the package each needs (transformers' names; sdpa and eager need nothing more).
ATTENTION_PACKAGES = {
    "eager": None,
    "sdpa": None,
    "flex_attention": None,
    "flash_attention_2": "flash_attn",
    "flash_attention_3": "flash_attn_interface",
}


def check_speed_switches(options: TrainFlags) -> None:
    """Every speed switch the run can use, or one line naming the one it cannot and the way on (before torch)."""
    pipelined = options.pp_size is not None
    check_attention(options.attn_implementation)
    settings = options.ds_settings
    stage = settings.zero_stage if settings else 0
    check_cross_entropy(options.cross_entropy, stage, options.tp_size, pipelined)
    if options.compile != "off" and pipelined:
        raise UserError(f"--compile {options.compile} does not apply to DeepSpeed's pipeline engine: leave it out")
    if options.compile != "deepcompile":
        return
    if settings is None:
        raise UserError("--compile deepcompile is DeepSpeed's: give a DeepSpeed --config, or --compile torch")
    if stage == 0 and not parallel_passes(settings):
        # DeepSpeed's ZeRO passes need ZeRO-1/2/3: at ZeRO-0 it falls back to torch.compile, saying nothing
        raise UserError(
            f"--compile deepcompile is DeepSpeed's ZeRO-1/2/3 compiler passes, and {settings.path} is ZeRO-0: "
            "use a ZeRO-1/2/3 config, or --compile torch"
        )


def parallel_passes(settings: DeepSpeedSettings) -> bool:
    """Whether the config's compile section asks deepcompile for a pass that runs at any ZeRO stage (autotp, autosp:
    DeepSpeed 0.19.8's engine `get_deepspeed_compile_backend`)."""
    return bool({"autotp", "autosp"} & set(settings.compile_passes))


def check_cross_entropy(kind: str, zero_stage: int, tp_size: int, pipelined: bool) -> None:
    if kind == "hf":
        return
    if zero_stage == 3:
        raise UserError(
            f"--cross-entropy {kind} reads the output head's whole weight, which ZeRO-3 partitions: use a ZeRO-0/1/2 "
            "config, or --cross-entropy hf"
        )
    if tp_size > 1 or pipelined:
        raise UserError(f"--cross-entropy {kind} takes the model whole: leave out --tp-size/--pp-size, or use hf")
    if kind == "liger" and importlib.util.find_spec("liger_kernel") is None:
        raise UserError(
            "--cross-entropy liger needs the liger-kernel package, which this environment lacks: "
            "--cross-entropy chunked is the same algorithm in plain torch"
        )


def check_attention(name: str | None) -> None:
    if name is None:
        return
    if name not in ATTENTION_PACKAGES:
        known = ", ".join(ATTENTION_PACKAGES)
        raise UserError(f"--attn-implementation {name!r} is not one of {known}")
    package = ATTENTION_PACKAGES[name]
    if package and importlib.util.find_spec(package) is None:
        raise UserError(
            f"--attn-implementation {name} needs the {package} package, which this environment lacks: "
            "use sdpa (PyTorch's fused attention, the default), or install it into the image"
        )


def set_dropout(config: Any, rate: float | None) -> list[str]:
    """Set every dropout rate of an HF model config to `rate` (None: unchanged); the names it set."""
    if rate is None:
        return []
    names = [
        key
        for key, value in config.to_dict().items()
        if (key.endswith("dropout") or key.endswith("_pdrop")) and isinstance(value, int | float)
    ]
    for key in names:
        setattr(config, key, rate)
    return names


def model_kwargs(options: TrainFlags) -> dict[str, Any]:
    """What from_pretrained / from_config are given for the switches (the attention kernel)."""
    return {"attn_implementation": options.attn_implementation} if options.attn_implementation else {}
