"""The DeepSpeed ops a DeepSpeed config makes the ranks load (zerokit.sources.ds_ops), as DeepSpeed 0.19.8 builds
them, and the install's prebuilt ops read without importing DeepSpeed (zerokit.image.ds_install)."""

from __future__ import annotations

import json

import pytest

from zerokit.image.ds_install import parse_installed
from zerokit.sources.ds_configs import CONFIGS_DIR
from zerokit.sources.ds_ops import ops_needed


def config(optimizer: str | None = None, offload: str | None = None, stage: int = 2, **extra) -> dict:
    """A small DeepSpeed config: the optimizer's type, where ZeRO offloads it, and any other sections."""
    zero: dict = {"stage": stage}
    if offload:
        zero["offload_optimizer"] = {"device": offload}
    return {
        **({"optimizer": {"type": optimizer, "params": {"lr": "auto"}}} if optimizer else {}),
        "zero_optimization": zero,
        **extra,
    }


@pytest.mark.parametrize(
    ("ds_config", "accelerator", "ops"),
    [
        (config("AdamW"), "cuda", {"fused_adam"}),
        (config("Adam"), "cuda", {"fused_adam"}),
        (config("adamw"), "cuda", {"fused_adam"}),  # any case, as DeepSpeed matches its own names
        (config("AdamW", "cpu"), "cuda", {"cpu_adam"}),
        (config("Adam", "nvme", stage=3), "cuda", {"cpu_adam", "async_io"}),
        (config("Adagrad"), "cuda", set()),  # torch's Adagrad
        (config("Adagrad", "cpu"), "cuda", {"cpu_adagrad"}),
        (config("Lion"), "cuda", {"fused_lion"}),
        (config("Lion", "cpu"), "cuda", {"cpu_lion"}),
        (config("Lamb"), "cuda", {"fused_lamb"}),
        (config("Muon"), "cuda", {"fused_adam"}),  # Muon's Adam half
        (config("AdamW", "cpu"), "cpu", {"cpu_adam"}),
        (config("AdamW"), "cpu", {"fused_adam"}),  # the CPU accelerator's fused_adam (CPU Adam sources)
        (config("Lion", "cpu"), "cpu", {"cpu_lion"}),
        (config(None), "cuda", set()),  # HF's Trainer makes torch's AdamW
        (config("SGD"), "cuda", set()),  # torch.optim's
        (config("OneBitAdam"), "cuda", set()),  # not in 0.19.8: nothing to compile
        (config("ZeroOneAdam"), "cuda", set()),
        (config("OneBitLamb"), "cuda", set()),
        (config("MuAdam"), "cuda", set()),  # mup's
        ({"zero_optimization": {"stage": 2, "cpu_offload": True}, "optimizer": {"type": "Adam"}}, "cuda", {"cpu_adam"}),
    ],
)
def test_the_optimizer_names_the_op_deepspeed_builds(ds_config: dict, accelerator: str, ops: set[str]):
    assert set(ops_needed(ds_config, accelerator)) == ops


def test_torch_adam_needs_no_op_even_offloaded():
    """get_optimizer_configuration reads torch_adam first: torch's Adam, offloaded or not."""
    for offload in (None, "cpu"):
        ds_config = config("AdamW", offload)
        ds_config["optimizer"]["params"]["torch_adam"] = True
        assert ops_needed(ds_config, "cuda") == {}


def test_offload_to_nvme_needs_async_io_or_gds():
    params = {"stage": 3, "offload_param": {"device": "nvme", "nvme_path": "/local"}}
    assert ops_needed({"zero_optimization": params}, "cuda") == {"async_io": "zero_optimization.offload_param to nvme"}
    gds = {"zero_optimization": params, "aio": {"use_gds": True}}
    assert set(ops_needed(gds, "cuda")) == {"gds"}
    # the optimizer's swapper loads async_io whatever aio says; the param swapper follows use_gds
    both = {**gds, "zero_optimization": {**params, "offload_optimizer": {"device": "nvme"}}}
    assert set(ops_needed(both, "cuda")) == {"async_io", "gds"}
    assert set(ops_needed({"aio": {"block_size": 1048576}}, "cuda")) == set()  # the aio section alone loads nothing


def test_offload_to_cpu_and_nvme_below_stage_3_loads_no_swapper():
    assert set(ops_needed(config("AdamW", "nvme", stage=2), "cuda")) == {"cpu_adam"}
    params = {"stage": 2, "offload_param": {"device": "nvme"}}
    assert ops_needed({"zero_optimization": params}, "cuda") == {}


def test_the_fast_checkpoint_writer_and_zero_plus_plus_need_their_ops():
    assert set(ops_needed({"checkpoint": {"writer": {}}}, "cuda")) == {"async_io"}  # type fast by default
    assert set(ops_needed({"checkpoint": {"writer": {"type": "python"}}}, "cuda")) == set()
    assert set(ops_needed(config(stage=3, zero_quantized_weights=True), "cuda")) == set()  # not in zero_optimization
    zero3 = {"zero_optimization": {"stage": 3, "zero_quantized_gradients": True}}
    assert set(ops_needed(zero3, "cuda")) == {"quantizer"}


def test_deepcompile_loads_its_op_at_zero_1_2_3_only():
    """At ZeRO-0 DeepSpeed's compile falls back to torch.compile and loads nothing."""
    for stage in (1, 2, 3):
        compiled = {"zero_optimization": {"stage": stage}, "compile": {"deepcompile": True}}
        assert ops_needed(compiled, "cuda") == {"dc": "compile.deepcompile"}
    assert ops_needed({"zero_optimization": {"stage": 0}, "compile": {"deepcompile": True}}, "cuda") == {}
    assert ops_needed({"zero_optimization": {"stage": 2}, "compile": {"deepcompile": False}}, "cuda") == {}


def test_the_reason_names_the_optimizer_and_what_the_cpu_accelerator_lacks():
    assert ops_needed(config("Lion"), "cuda") == {"fused_lion": "the config's optimizer Lion"}
    assert ops_needed(config("AdamW", "cpu"), "cuda") == {"cpu_adam": "the config's optimizer AdamW, offloaded to cpu"}
    (why,) = ops_needed(config("Lamb"), "cpu").values()
    assert why == "the config's optimizer Lamb; DeepSpeed's cpu accelerator has none"
    assert ops_needed(config("AdamW"), "cpu") == {"fused_adam": "the config's optimizer AdamW"}


@pytest.mark.parametrize("path", sorted(CONFIGS_DIR.glob("*.json")), ids=lambda p: p.stem)
def test_each_bundled_config_needs_its_optimizers_op(path):
    ds_config = json.loads(path.read_text())
    offload = ds_config["zero_optimization"].get("offload_optimizer", {}).get("device", "none")
    assert ds_config["optimizer"]["type"] == "AdamW"
    expected = {"cpu_adam"} if offload == "cpu" else {"fused_adam"}
    assert set(ops_needed(ds_config, "cuda")) == expected
    assert set(ops_needed(ds_config, "cpu")) == expected
    assert (path.stem == "zero3-offload") == (expected == {"cpu_adam"})


def test_the_installed_ops_are_read_from_deepspeeds_file():
    text = (
        "version='0.19.8'\ngit_hash='abc'\ngit_branch='[none]'\n"
        "installed_ops={'async_io': 1, 'fused_adam': True, 'fused_lion': False}\n"
        "accelerator_name='cuda'\ntorch_info={'version': '2.13', 'cuda_version': '0.0'}\n"
    )
    prebuilt = parse_installed(text)
    assert prebuilt is not None
    assert (prebuilt.accelerator, prebuilt.ops) == ("cuda", {"async_io": True, "fused_adam": True, "fused_lion": False})
    assert parse_installed("version='0.19.8'\n") is None
