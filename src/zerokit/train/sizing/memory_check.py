"""Train's memory check, before the model is built: the run's numbers against this node's.

The model is counted on the meta device (no memory), its layout read from the DeepSpeed config and the
ranks, and both judged by zerokit.train.sizing.memory_need against zerokit.cluster.node_memory's probes: a
run that cannot fit is refused in one line naming a fix, instead of the kernel's OOM killer ending it
minutes later with no word, or CUDA running out in the first step.
"""

from __future__ import annotations

import os
import sys

from zerokit.foundations.errors import UserError
from zerokit.train.options import TrainFlags
from zerokit.train.sizing.memory_need import Node, Setup, judge


def count_parameters(options: TrainFlags, config, zero3_hook=None) -> tuple[int, int, int]:
    """(all, trainable) parameters of the model this run builds from config, counted on the meta device, and
    the bytes of each as built (the config's dtype, as from_config and from_pretrained build it).

    zero3_hook: transformers' DeepSpeed config (TrainingArguments.hf_deepspeed_config), set aside meanwhile:
    under ZeRO-3 from_config would partition the model through zero.Init."""
    import torch
    from transformers import AutoModelForCausalLM
    from transformers.integrations.deepspeed import set_hf_deepspeed_config, unset_hf_deepspeed_config

    from zerokit.train.model.lora import apply_lora, parse_lora, train_last_layers

    unset_hf_deepspeed_config()
    try:
        with torch.device("meta"):
            model = AutoModelForCausalLM.from_config(config)
            if options.lora is not None:
                model = apply_lora(model, parse_lora(options.lora))
            elif options.train_last_layers:
                train_last_layers(model, options.train_last_layers)
    finally:
        if zero3_hook is not None:
            set_hf_deepspeed_config(zero3_hook)
    parameters = list(model.parameters())
    total = sum(p.numel() for p in parameters)
    return total, sum(p.numel() for p in parameters if p.requires_grad), parameters[0].element_size()


def setup(options: TrainFlags, args, counted: tuple[int, int, int], world: int, on_gpu: bool) -> Setup:
    """The numbers of this run: its DeepSpeed config (ZeRO stage, offload, precision) and its layout."""
    ds = options.ds_settings
    mixed = ds is not None and ds.sixteen_bit(args.bf16, args.fp16)  # without DeepSpeed, amp keeps fp32
    tp, pp = options.tp_size, options.pp_size or 1
    parameters, trainable, build_bytes = counted
    return Setup(
        parameters=parameters,
        trainable=trainable,
        zero_stage=ds.zero_stage if ds else 0,
        precision_bytes=2 if mixed else 4,
        offload_optimizer=ds.offload_optimizer if ds else "none",
        offload_param=ds.offload_param if ds else "none",
        tp=tp,
        pp=pp,
        dp=max(world // (tp * pp), 1),
        on_gpu=on_gpu,
        build_bytes=build_bytes,
    )


def probe_node(on_gpu: bool, device) -> Node:
    """This node: the host memory its ranks may still take, its ranks, this rank's free GPU memory."""
    from zerokit.cluster.node_memory import host_available

    ranks = int(os.environ.get("LOCAL_WORLD_SIZE") or os.environ.get("WORLD_SIZE") or 1)
    free = None
    if on_gpu:
        import torch

        free = torch.cuda.mem_get_info(device)[0]
    return Node(host_available=host_available(), ranks=ranks, device_free=free)


def check_memory(options: TrainFlags, args, config, world: int, on_gpu: bool) -> Setup:
    """Refuse a run that cannot fit this node, warn (once per node) about one that barely does; returns the
    run's numbers (its parameters, those trained)."""
    run = setup(
        options, args, count_parameters(options, config, getattr(args, "hf_deepspeed_config", None)), world, on_gpu
    )
    fresh = not options.model or options.from_scratch
    verdict = judge(run, probe_node(on_gpu, args.device), fresh=fresh)
    if verdict is not None and verdict.refused:
        raise UserError(f"not enough memory: {verdict.line}")
    if verdict is not None and os.environ.get("LOCAL_RANK", "0") == "0":
        print(f"zerokit: warning: memory is tight: {verdict.line}", file=sys.stderr, flush=True)
    return run
