"""Parameter-efficient fine-tuning: LoRA adapters (peft) and training only the last N layers.

`--lora r=8,alpha=16,dropout=0.05,targets=q_proj,v_proj`: every key is optional; targets default
per architecture (DEFAULT_TARGETS, else peft's own table).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from zerokit.foundations.errors import UserError
from zerokit.train.options import LORA_FORMAT

# All attention projections, the usual choice; GPT-2's c_proj is both the attention and MLP output.
DEFAULT_TARGETS = {
    "gpt2": ("c_attn", "c_proj"),
    "llama": ("q_proj", "k_proj", "v_proj", "o_proj"),
    "mistral": ("q_proj", "k_proj", "v_proj", "o_proj"),
    "qwen2": ("q_proj", "k_proj", "v_proj", "o_proj"),
    "qwen3": ("q_proj", "k_proj", "v_proj", "o_proj"),
    "gemma": ("q_proj", "k_proj", "v_proj", "o_proj"),
    "phi3": ("qkv_proj", "o_proj"),
}
# Names of the module list holding the transformer blocks, across architectures.
BLOCK_LISTS = ("h", "layers", "blocks", "block")


@dataclass(frozen=True)
class LoraSpec:
    r: int = 8
    alpha: int = 16
    dropout: float = 0.05
    targets: tuple[str, ...] = field(default_factory=tuple)


def parse_lora(text: str) -> LoraSpec:
    """Parse `--lora`; a bare item after `targets=` is one more target (`targets=q_proj,v_proj`)."""
    values: dict[str, str | list[str]] = {}
    key = None
    for item in filter(None, (part.strip() for part in text.split(","))):
        if "=" in item:
            key, value = (s.strip() for s in item.split("=", 1))
            values[key] = [value] if key == "targets" else value
        elif key == "targets":
            values["targets"].append(item)
        else:
            raise UserError(f"--lora {text!r}: {item!r} is not key=value; format: {LORA_FORMAT}")
    unknown = set(values) - {"r", "alpha", "dropout", "targets"}
    if unknown:
        raise UserError(f"--lora {text!r}: unknown key(s) {', '.join(sorted(unknown))}; format: {LORA_FORMAT}")
    try:
        spec = LoraSpec(
            r=int(values.get("r", LoraSpec.r)),
            alpha=int(values.get("alpha", LoraSpec.alpha)),
            dropout=float(values.get("dropout", LoraSpec.dropout)),
            targets=tuple(values.get("targets", ())),
        )
    except ValueError as error:
        raise UserError(f"--lora {text!r}: {error}; format: {LORA_FORMAT}") from None
    if spec.r < 1 or not 0 <= spec.dropout < 1:
        raise UserError(f"--lora {text!r}: r must be at least 1 and dropout in [0, 1); format: {LORA_FORMAT}")
    return spec


def default_targets(model_type: str) -> tuple[str, ...]:
    from peft.utils.constants import TRANSFORMERS_MODELS_TO_LORA_TARGET_MODULES_MAPPING as PEFT_TARGETS

    targets = DEFAULT_TARGETS.get(model_type) or tuple(PEFT_TARGETS.get(model_type, ()))
    if not targets:
        raise UserError(f"no default LoRA targets for model type {model_type!r}: pass --lora targets=NAME,NAME")
    return targets


def apply_lora(model, spec: LoraSpec):
    """Wrap model in a peft LoRA model; only the adapters train."""
    from peft import LoraConfig, get_peft_model
    from transformers.pytorch_utils import Conv1D

    targets = spec.targets or default_targets(model.config.model_type)
    targeted = [m for name, m in model.named_modules() if name.rsplit(".", 1)[-1] in targets]
    if not targeted:
        raise UserError(f"--lora targets {', '.join(targets)} match no module of this {model.config.model_type} model")
    config = LoraConfig(
        task_type="CAUSAL_LM",
        r=spec.r,
        lora_alpha=spec.alpha,
        lora_dropout=spec.dropout,
        target_modules=list(targets),
        fan_in_fan_out=any(isinstance(m, Conv1D) for m in targeted),  # GPT-2 stores weights transposed
    )
    return get_peft_model(model, config)


def train_last_layers(model, count: int) -> None:
    """Freeze everything but the last `count` transformer blocks and what follows them (the final norm).

    The output embeddings stay frozen: they are often tied to the input embeddings.
    """
    import torch

    lists = [
        (name, module)
        for name, module in model.named_modules()
        if isinstance(module, torch.nn.ModuleList) and name.rsplit(".", 1)[-1] in BLOCK_LISTS
    ]
    if not lists:
        raise UserError("--train-last-layers: no list of transformer blocks found in this model")
    list_name, blocks = max(lists, key=lambda item: len(item[1]))
    if not 1 <= count <= len(blocks):
        raise UserError(f"--train-last-layers {count}: the model has {len(blocks)} layers")
    output_params = {id(p) for p in model.get_output_embeddings().parameters()}
    trainable = {id(p) for block in blocks[-count:] for p in block.parameters()}
    after_blocks = False
    for name, param in model.named_parameters():
        if name.startswith(f"{list_name}."):
            after_blocks = True
        elif after_blocks and id(param) not in output_params:
            trainable.add(id(param))
    for param in model.parameters():
        param.requires_grad = id(param) in trainable


def count_parameters(model) -> tuple[int, int]:
    """(trainable, total); partitioned ZeRO-3 parameters count with their full size."""
    sizes = [(getattr(p, "ds_numel", p.numel()), p.requires_grad) for p in model.parameters()]
    return sum(n for n, grad in sizes if grad), sum(n for n, _ in sizes)


def merge_adapter(base: str, adapter_dir: str, output: str) -> None:
    """Load base + adapter, fold the adapter into the weights, save a plain transformers model."""
    from peft import PeftModel
    from transformers import AutoModelForCausalLM, AutoTokenizer

    model = PeftModel.from_pretrained(AutoModelForCausalLM.from_pretrained(base), adapter_dir)
    model.merge_and_unload().save_pretrained(output)
    AutoTokenizer.from_pretrained(adapter_dir).save_pretrained(output)
