"""The DeepSpeed ops a DeepSpeed config makes the ranks load, read from the config as DeepSpeed 0.19.8 reads it.

A rank loads an op that the install did not prebuild by compiling it (JIT, on every node, at start: minutes,
and it fails offline or without a compiler). Which op loads follows from the config:

- optimizer Adam, AdamW, or Muon (its Adam half): none with params.torch_adam (torch's), else cpu_adam with
  the optimizer offloaded (cpu or nvme), else fused_adam (runtime/engine.py `get_optimizer_configuration`);
- optimizer Adagrad: cpu_adagrad offloaded, else none (torch's); Lion: cpu_lion offloaded, else fused_lion;
  Lamb: fused_lamb (engine `_configure_basic_optimizer`);
- ZeRO-3 with offload_optimizer to nvme: async_io (runtime/swap_tensor/*optimizer_swapper.py);
- ZeRO-3 with offload_param to nvme: async_io, gds with aio.use_gds (swap_tensor/partitioned_param_swapper.py);
- checkpoint.writer of type fast (its default): async_io, gds with aio.use_gds (model_checkpointing/writer_factory.py);
- ZeRO-3 with zero_quantized_weights, _nontrainable_weights or _gradients: quantizer (zero/partition_parameters.py,
  comm/coalesced_collectives.py);
- compile.deepcompile with ZeRO-1, 2 or 3, once the engine is compiled: dc (compile/util.py `get_deepcompile_handle`;
  at ZeRO-0 DeepSpeed falls back to torch.compile, engine.py `get_deepcompile_backend`).

The type is matched in any case, as DeepSpeed matches its own. Any other type is torch.optim's class of that
name (or mup's): no op. DeepSpeed 0.19.8 has no 1-bit optimizers (OneBitAdam, ZeroOneAdam, OneBitLamb were
removed): such a type fails in DeepSpeed as a torch.optim name, not in a compile, so nothing is claimed for it.
Without an optimizer section HF's Trainer makes torch's AdamW: no op. The `aio` section alone loads nothing;
it only picks gds over async_io where a swapper or writer loads one.

The accelerator resolves each op to its builder (deepspeed/accelerator/*_accelerator.py `get_op_builder`):
the CPU one builds fused_adam (from the CPU Adam sources), cpu_adam, cpu_adagrad, cpu_lion, async_io, pin_memory
and the comm ops, and none of the others: a rank there fails loading them ("not been implemented on CPU
backend"), which the reason says.
"""

from __future__ import annotations

# The ops deepspeed/accelerator/cpu_accelerator.py `get_op_builder` builds; any other is NotImplementedBuilder.
CPU_BUILDS = frozenset(
    (
        "fused_adam",
        "cpu_adam",
        "cpu_adagrad",
        "cpu_lion",
        "async_io",
        "pin_memory",
        "deepspeed_shm_comm",
        "deepspeed_ccl_comm",
    )
)
QUANTIZED = ("zero_quantized_weights", "zero_quantized_nontrainable_weights", "zero_quantized_gradients")


def ops_needed(ds_config: dict, accelerator: str) -> dict[str, str]:
    """op -> why, for each op a rank with this DeepSpeed config loads on this accelerator ("cpu", "cuda", ...)."""
    zero = ds_config.get("zero_optimization")
    zero = zero if isinstance(zero, dict) else {}
    stage3 = zero.get("stage") == 3
    needed = optimizer_ops(ds_config.get("optimizer"), offload_device(zero))
    swap = "gds" if section(ds_config, "aio").get("use_gds") is True else "async_io"
    if stage3 and offload_device(zero) == "nvme":
        needed.setdefault("async_io", "zero_optimization.offload_optimizer to nvme")
    if stage3 and section(zero, "offload_param").get("device") == "nvme":
        needed.setdefault(swap, "zero_optimization.offload_param to nvme")
    writer = section(ds_config, "checkpoint").get("writer")
    if isinstance(writer, dict) and str(writer.get("type", "fast")).lower() == "fast":
        needed.setdefault(swap, "checkpoint.writer of type fast")
    quantized = [key for key in QUANTIZED if zero.get(key) is True]
    if stage3 and quantized:
        needed.setdefault("quantizer", f"zero_optimization.{quantized[0]}")
    if section(ds_config, "compile").get("deepcompile") is True and zero.get("stage") in (1, 2, 3):
        needed.setdefault("dc", "compile.deepcompile")
    if accelerator == "cpu":
        return {
            op: why if op in CPU_BUILDS else f"{why}; DeepSpeed's cpu accelerator has none"
            for op, why in needed.items()
        }
    return needed


def optimizer_ops(optimizer: object, offload: str) -> dict[str, str]:
    """The op the config's optimizer section makes DeepSpeed build, with the optimizer offloaded to `offload`."""
    if not isinstance(optimizer, dict) or not isinstance(optimizer.get("type"), str):
        return {}
    name = optimizer["type"]
    params = optimizer.get("params")
    offloaded = offload in ("cpu", "nvme")
    why = f"the config's optimizer {name}" + (f", offloaded to {offload}" if offloaded else "")
    kind = name.lower()
    if kind in ("adam", "adamw", "muon"):
        if isinstance(params, dict) and params.get("torch_adam") is True:
            return {}
        return {"cpu_adam" if offloaded else "fused_adam": why}
    if kind == "adagrad":
        return {"cpu_adagrad": why} if offloaded else {}
    if kind == "lion":
        return {"cpu_lion" if offloaded else "fused_lion": why}
    if kind == "lamb":
        return {"fused_lamb": why}
    return {}


def offload_device(zero: dict) -> str:
    """Where ZeRO offloads the optimizer: "cpu", "nvme" or "none" (the deprecated cpu_offload: true is cpu)."""
    device = section(zero, "offload_optimizer").get("device")
    if isinstance(device, str):
        return device
    return "cpu" if zero.get("cpu_offload") is True else "none"


def section(config: dict, name: str) -> dict:
    """config[name] when it is a section (a JSON object), else an empty one."""
    value = config.get(name)
    return value if isinstance(value, dict) else {}
