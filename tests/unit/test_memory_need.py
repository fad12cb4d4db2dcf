"""The memory a rank needs (zerokit.train.sizing.memory_need): a hand computation, DeepSpeed's estimators, and
the runs it refuses, warns about or lets through; train's reading of a run's numbers
(zerokit.train.sizing.memory_check)."""

from __future__ import annotations

import re
from types import SimpleNamespace

import pytest

from zerokit.sources.ds_configs import bundled
from zerokit.train.options import TrainFlags
from zerokit.train.parallel.tensor_parallel import SMALL_LLAMA, check_model_type
from zerokit.train.sizing.memory_check import count_parameters, setup
from zerokit.train.sizing.memory_need import GiB, Node, Setup, estimate, judge

# `train --model-type llama`: transformers' LlamaConfig(), its vocabulary fitted to the embedded tokenizer's 512
# tokens, counted on the meta device (6,738,415,616 with LlamaConfig's own 32000)
DEFAULT_LLAMA = 6_480_465_920
P = 1_000_000_000
# This development machine: 24 GiB of memory (23.5 GiB MemTotal, about 22 GiB available), 2 cores, no GPU.
THIS_MACHINE = Node(host_available=22 * GiB, ranks=1)


def test_fp32_zero2_on_one_cpu_rank_by_hand():
    need = estimate(Setup(parameters=P, trainable=P, zero_stage=2, precision_bytes=4))
    # weights 4, fp32 gradients 4, fp32 master 4, Adam 8 bytes per parameter: one rank holds them all
    assert dict((name, size) for name, size, _ in need.parts) == {
        "weights": 4 * P, "fp32 gradients": 4 * P, "fp32 master": 4 * P, "Adam": 8 * P,
    }  # fmt: skip
    assert (need.host, need.device, need.build) == (20 * P, 0, 4 * P)


def test_mixed_precision_zero2_on_four_gpus_by_hand():
    need = estimate(Setup(parameters=P, trainable=P, zero_stage=2, precision_bytes=2, dp=4, on_gpu=True))
    # 16-bit weights whole (2); 16-bit and fp32 gradients, master weights and Adam partitioned: (2+4+4+8) / 4
    assert need.device == 2 * P + 18 * P // 4
    assert need.host == 4 * P  # the whole fp32 model each rank builds before DeepSpeed moves it to the GPU
    tp2 = estimate(Setup(parameters=P, trainable=P, zero_stage=2, precision_bytes=2, tp=2, dp=2, on_gpu=True))
    assert tp2.device == (2 * P + 18 * P // 2) // 2 and tp2.host == 4 * P  # TP halves all; the build stays whole


def test_frozen_parameters_need_no_gradients_or_optimizer_states():
    need = estimate(Setup(parameters=P, trainable=P // 100, zero_stage=2, precision_bytes=4))
    assert need.host == 4 * P + 16 * (P // 100)


@pytest.mark.parametrize("gpus", [1, 4, 8])
def test_zero2_agrees_with_deepspeeds_estimator(gpus):
    from deepspeed.runtime.zero.stage_1_and_2 import estimate_zero2_model_states_mem_needs as deepspeed

    kept = estimate(Setup(parameters=P, trainable=P, zero_stage=2, precision_bytes=2, dp=gpus, on_gpu=True))
    cpu, gpu = deepspeed(P, num_gpus_per_node=gpus, cpu_offload=False, additional_buffer_factor=1)
    assert (kept.device, kept.host * gpus) == (gpu, cpu)
    offload = Setup(P, P, zero_stage=2, precision_bytes=2, offload_optimizer="cpu", dp=gpus, on_gpu=True)
    cpu, gpu = deepspeed(P, num_gpus_per_node=gpus, cpu_offload=True, additional_buffer_factor=1)
    assert (estimate(offload).device, estimate(offload).host * gpus) == (gpu, cpu)  # max(4 x gpus, 16) per param


@pytest.mark.parametrize("gpus", [1, 4, 8])
def test_zero3_agrees_with_deepspeeds_estimator_but_for_the_16_bit_weights(gpus):
    """DeepSpeed counts 18 bytes per parameter at ZeRO-3 and the layer it gathers (left out here, passed as 0);
    this estimate also counts the 16-bit weights' own partition: 2 bytes more, where they stay on the GPU."""
    from deepspeed.runtime.zero.stage3 import estimate_zero3_model_states_mem_needs as deepspeed

    offload = Setup(P, P, zero_stage=3, precision_bytes=2, offload_optimizer="cpu", offload_param="cpu", dp=gpus,
                    on_gpu=True)  # fmt: skip
    cpu, gpu, _ = deepspeed(P, 0, num_gpus_per_node=gpus, additional_buffer_factor=1)
    assert (estimate(offload).device, estimate(offload).host * gpus) == (gpu, cpu)
    kept = Setup(P, P, zero_stage=3, precision_bytes=2, dp=gpus, on_gpu=True)
    cpu, gpu, _ = deepspeed(P, 0, num_gpus_per_node=gpus, cpu_offload=False, additional_buffer_factor=1)
    assert estimate(kept).device == gpu + 2 * P // gpus and estimate(kept).host == cpu == 0  # zero.Init: no copy


def test_the_default_llama_is_refused_on_this_machine_naming_a_fix():
    default = Setup(DEFAULT_LLAMA, DEFAULT_LLAMA, zero_stage=2, precision_bytes=4)  # train --model-type llama
    verdict = judge(default, THIS_MACHINE, fresh=True)
    assert verdict is not None and verdict.refused
    assert verdict.line.startswith("this run needs at least 121 GiB of host memory for its 1 rank on this node")
    assert "6.48B parameters, ZeRO-2, fp32" in verdict.line and "activations not counted" in verdict.line
    assert "--config zero3 over 6 nodes like this one" in verdict.line and "--config-overrides" in verdict.line


def test_on_a_gpu_node_the_fix_is_one_that_fits():
    node = Node(host_available=480 * GiB, ranks=8, device_free=78 * GiB)
    big = Setup(70 * P, 70 * P, zero_stage=2, precision_bytes=2, dp=8, on_gpu=True)
    verdict = judge(big, node, fresh=False)
    assert verdict.refused and "2086 GiB of host memory for its 8 ranks" in verdict.line  # 8 whole fp32 copies
    assert verdict.line.endswith("(activations not counted): --config zero3 over 3 nodes like this one (24 ranks)")
    assert "--config-overrides" not in verdict.line  # a pretrained model is not made smaller
    assert judge(Setup(7 * P, 7 * P, zero_stage=2, precision_bytes=2, dp=8, on_gpu=True), node, False) is None


def test_a_run_close_to_the_limit_is_warned_about_not_refused():
    run = Setup(P, P, zero_stage=2, precision_bytes=4)  # 20 GB
    warned = judge(run, Node(host_available=21 * P, ranks=1), fresh=True)
    assert warned is not None and not warned.refused and "95% of the 19.6 GiB it has" in warned.line
    assert judge(run, Node(host_available=24 * P, ranks=1), fresh=True) is None  # 83%: under CLOSE


def test_the_small_llama_the_tensor_parallel_refusal_suggests_fits_this_machine():
    """The refusal's own line, read back: 2 ranks of it, ZeRO-2 fp32 (train's defaults on CPU)."""
    with pytest.raises(Exception) as refused:
        check_model_type(2, "gpt2", embedded=True)
    overrides = re.search(r'--model-type llama --config-overrides "([^"]+)"', str(refused.value)).group(1)
    assert overrides == SMALL_LLAMA
    options = TrainFlags(model_type="llama", config_overrides=overrides, tp_size=2)
    total, trainable, build = count_parameters(options, llama_config(overrides))
    assert total == trainable and build == 4 and total < 10 * 10**6
    args = SimpleNamespace(bf16=False, fp16=False)
    run = setup(options, args, (total, trainable, build), world=2, on_gpu=False)
    assert (run.tp, run.dp, run.zero_stage, run.precision_bytes) == (2, 1, 2, 4)
    assert judge(run, Node(host_available=22 * GiB, ranks=2), fresh=True) is None


def test_the_ds_config_gives_the_stage_offload_and_precision():
    args = SimpleNamespace(bf16=True, fp16=False)
    offload = setup(TrainFlags(config=str(bundled("zero3-offload"))), args, (P, P, 4), world=4, on_gpu=True)
    assert (offload.zero_stage, offload.offload_optimizer, offload.offload_param) == (3, "cpu", "cpu")
    assert (offload.precision_bytes, offload.dp) == (2, 4)
    plain = setup(TrainFlags(config="none"), args, (P, P, 4), world=1, on_gpu=True)
    assert (plain.zero_stage, plain.precision_bytes) == (0, 4)  # amp keeps fp32 weights


def test_lora_counts_only_the_adapters_as_trained():
    options = TrainFlags(model_type="llama", lora="r=8")
    total, trainable, _ = count_parameters(options, llama_config(SMALL_LLAMA))
    assert 0 < trainable < total / 10


def llama_config(overrides: str):
    from transformers import LlamaConfig

    from zerokit.sources.embedded import VOCAB_SIZE

    config = LlamaConfig(vocab_size=VOCAB_SIZE)  # train fits a fresh config to the embedded tokenizer
    config.update_from_string(overrides)
    return config
