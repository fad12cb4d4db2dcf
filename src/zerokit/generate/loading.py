"""The model to generate with: what training left (a model folder, a run without final weights, ZeRO shards, a
LoRA adapter on its base), placed as asked: on this rank's device; spread over the node's GPUs, CPU and disk
by accelerate (--device-map, for a model larger than one device); or split over --tp-size ranks by DeepSpeed
AutoTP (tensor parallel)."""

from __future__ import annotations

import contextlib
import json
import os
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from zerokit.cluster.shm_segments import release_own_segment
from zerokit.foundations.errors import UserError
from zerokit.generate.options import GenerateFlags
from zerokit.outputs.checkpoints import complete_checkpoints, damage
from zerokit.sources.model_source import from_pretrained_checked, is_path

ADAPTER_CONFIG = "adapter_config.json"
# A folder with one of these holds a model's weights (or an adapter's) that from_pretrained reads.
WEIGHTS = (
    "model.safetensors", "model.safetensors.index.json", "pytorch_model.bin", "pytorch_model.bin.index.json",
    "adapter_model.safetensors", "adapter_model.bin",
)  # fmt: skip
DTYPE_NAMES = {"bf16": "bfloat16", "fp16": "float16", "fp32": "float32"}


def has_weights(folder: Path) -> bool:
    return any((folder / name).is_file() for name in WEIGHTS)


def model_to_load(folder: Path) -> Path:
    """What training left, as generate reads it: a folder with weights as it is; a run folder without final
    weights (stopped before its final save), its newest whole checkpoint; a checkpoint with only ZeRO shards,
    itself (load_model consolidates them). Anything else is refused in one line."""
    if has_weights(folder):
        return folder
    newest = next((c for c in complete_checkpoints(folder) if not damage(c)), None)
    if newest is not None:
        print(
            f"generate: {folder} has no final weights (the run stopped before its final save): "
            f"using its newest whole checkpoint, {newest.name}",
            file=sys.stderr,
        )
        return model_to_load(newest)
    if (folder / "latest").is_file() or not (folder / "config.json").is_file():
        return folder  # ZeRO shards; or no model at all, which require_model_folder names
    raise UserError(
        f"{folder} has a config but no weights ({WEIGHTS[0]}) and no checkpoint-N: give a folder whose run "
        "finished, or one of its checkpoint-N folders"
    )


@dataclass(frozen=True)
class Placement:
    """Where the weights go, from the flags: dtype, accelerate's device map (with its memory budget and
    offload folder), or the tensor-parallel group of this rank."""

    dtype: str | None = None
    device_map: str | None = None
    max_memory: dict | None = None
    offload_folder: Path | None = None
    tp_size: int = 1

    @classmethod
    def of(cls, options: GenerateFlags) -> Placement:
        return cls(options.dtype, options.device_map, options.max_memory, options.offload_folder, options.tp_size)

    def torch_dtype(self):
        """The dtype from_pretrained takes: a torch dtype, "auto" (the checkpoint's), or None (transformers')."""
        import torch

        return getattr(torch, DTYPE_NAMES[self.dtype]) if self.dtype in DTYPE_NAMES else self.dtype

    def from_pretrained_kwargs(self) -> dict:
        kwargs: dict = {} if self.dtype is None else {"dtype": self.torch_dtype()}
        if self.device_map:
            kwargs["device_map"] = self.device_map
            kwargs |= {"max_memory": self.max_memory} if self.max_memory else {}
            kwargs |= {"offload_folder": str(self.offload_folder)} if self.offload_folder else {}
        return kwargs


def rank_device() -> str:
    """This rank's device when the model sits on one: its local GPU, or the CPU."""
    import torch

    return f"cuda:{int(os.environ.get('LOCAL_RANK', '0'))}" if torch.cuda.is_available() else "cpu"


def input_device(model, placement: Placement) -> str:
    """Where a batch's tensors go: with a device map, the first GPU it uses (accelerate's hooks move them on
    from there), else the CPU; without one, the model's device."""
    if not placement.device_map:
        return str(model.device)
    gpus = [d for d in getattr(model, "hf_device_map", {}).values() if isinstance(d, int)]
    return f"cuda:{gpus[0]}" if gpus else "cpu"


def load_model(model_dir: str, base: str | None, placement: Placement, tp_group=None):
    """The model of a trained folder, or base + the LoRA adapter in it, placed; ready for generate()."""
    from transformers import AutoModelForCausalLM

    if placement.device_map and placement.offload_folder:
        placement.offload_folder.mkdir(parents=True, exist_ok=True)
    kwargs = placement.from_pretrained_kwargs()
    adapter_config = Path(model_dir) / ADAPTER_CONFIG
    if adapter_config.is_file():
        model = adapter_model(model_dir, base, kwargs)
    elif base:
        raise UserError(f"--base is for LoRA adapter folders; {model_dir} has no {ADAPTER_CONFIG}")
    elif is_path(model_dir) and not has_weights(Path(model_dir)) and (Path(model_dir) / "latest").is_file():
        if placement.device_map:
            raise UserError(
                f"{model_dir} holds ZeRO shards only, which --device-map cannot spread: write its weights first "
                "(python zero_to_fp32.py in the checkpoint folder) and generate from them"
            )
        model = consolidated_model(Path(model_dir))
        model = model.to(placement.torch_dtype()) if placement.dtype not in (None, "auto") else model
    else:
        model = from_pretrained_checked(
            model_dir, lambda: AutoModelForCausalLM.from_pretrained(model_dir, output_loading_info=True, **kwargs)
        )
    if placement.tp_size > 1:
        return tensor_parallel(model, placement, tp_group)
    return (model if placement.device_map else model.to(rank_device())).eval()


def adapter_model(model_dir: str, base: str | None, kwargs: dict):
    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    return PeftModel.from_pretrained(
        AutoModelForCausalLM.from_pretrained(adapter_base(model_dir, base), **kwargs), model_dir
    )


def adapter_base(model_dir: str, base: str | None) -> str:
    """The base model of a LoRA adapter folder: --base, else the one its adapter_config.json names."""
    base = base or json.loads((Path(model_dir) / ADAPTER_CONFIG).read_text()).get("base_model_name_or_path")
    if not base:
        raise UserError(f"{model_dir} is a LoRA adapter that names no base model: pass --base MODEL")
    return base


def config_source(model_dir: str, base: str | None) -> str:
    """Where the config of the model load_model builds is: the base of an adapter folder, else the folder."""
    return adapter_base(model_dir, base) if (Path(model_dir) / ADAPTER_CONFIG).is_file() else model_dir


@dataclass(frozen=True)
class GroupAsMpu:
    """A tensor-parallel process group in the shape DeepSpeed's inference engine takes as `mpu`."""

    group: Any

    def get_model_parallel_group(self) -> Any:
        return self.group

    def get_model_parallel_rank(self) -> int:
        import torch.distributed as dist

        return dist.get_rank(group=self.group)

    def get_model_parallel_world_size(self) -> int:
        import torch.distributed as dist

        return dist.get_world_size(group=self.group)


def tensor_parallel(model, placement: Placement, tp_group):
    """The model split over this rank's tensor-parallel group by DeepSpeed AutoTP (no kernel injection: any
    architecture AutoTP knows). Its layers are replaced in place; the module generates as before, with an
    all-reduce in each split layer. On CPU, DeepSpeed's shared-memory all-reduce needs LOCAL_SIZE, which
    launch sets for every rank (zerokit.cluster.base.RankEnv)."""
    with contextlib.redirect_stdout(sys.stderr):  # DeepSpeed's log lines: stdout may be the jsonl
        import deepspeed
        from deepspeed.module_inject.auto_tp import AutoTP

        if not AutoTP.supported(model):
            raise UserError(
                f"--tp-size: DeepSpeed AutoTP cannot split a {model.config.model_type} model (it keeps a kernel "
                "policy for it): use --tp-size 1, with --device-map auto for a model larger than one device"
            )
        # Several groups: DeepSpeed is handed the group as an `mpu`, not as `tp_group`, which DeepSpeed 0.19.8
        # (inference/engine.py) replaces by a group of ranks 0..tp_size-1 (AutoTP then shards by a size of -1
        # on ranks outside it). One group of every rank: DeepSpeed's own.
        config = {"tp_size": placement.tp_size} | ({"mpu": GroupAsMpu(tp_group)} if tp_group is not None else {})
        dtype = placement.torch_dtype() if placement.dtype not in (None, "auto") else model.dtype
        deepspeed.init_distributed()  # DeepSpeed's comm over the process group ranks.start made
        engine = deepspeed.init_inference(
            model.to(rank_device()), tensor_parallel=config, dtype=dtype, replace_with_kernel_inject=False
        )
    if rank_device() == "cpu":  # every rank has mapped the others' all-reduce segment by now
        import torch.distributed as dist

        dist.barrier()
        release_own_segment()
    return engine.module.eval()


def consolidated_model(folder: Path):
    """The model of a checkpoint holding only DeepSpeed ZeRO shards, in fp32, consolidated in memory as
    zero_to_fp32 does (nothing is written)."""
    from transformers import AutoConfig, AutoModelForCausalLM

    print(f"generate: {folder} holds ZeRO shards only: consolidating them in memory", file=sys.stderr)
    model = AutoModelForCausalLM.from_config(AutoConfig.from_pretrained(folder))
    with contextlib.redirect_stdout(sys.stderr):  # DeepSpeed's log and progress lines: stdout is the jsonl
        from deepspeed.utils.zero_to_fp32 import get_fp32_state_dict_from_zero_checkpoint

        state = get_fp32_state_dict_from_zero_checkpoint(str(folder))
    missing, unexpected = model.load_state_dict(state, strict=False)
    model.tie_weights()
    tied = set(getattr(model, "all_tied_weights_keys", None) or getattr(model, "_tied_weights_keys", None) or ())
    if unexpected or set(missing) - tied:
        raise UserError(
            f"{folder}: its ZeRO shards do not fit its config.json (missing {sorted(set(missing) - tied)[:3]}, "
            f"unexpected {unexpected[:3]}): give the checkpoint-N folder train wrote, unchanged"
        )
    return model
