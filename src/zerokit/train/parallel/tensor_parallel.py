"""`--tp-size N`: DeepSpeed AutoTP tensor parallelism in groups of N ranks x ZeRO data parallelism across them.

Ranks 0..N-1 form the first tensor-parallel group, N..2N-1 the next (DeepSpeed's layout), so a group never
spans nodes when N divides the ranks per node. Each group splits every attention and MLP projection over
its N ranks and sees one stream of batches (accelerate hands every rank of a group the same batch); the
DP = world / N groups are ZeRO 0-2's data-parallel ranks. The layouts that DeepSpeed or the Trainer
would fail on late, with a traceback, or split unevenly are refused here first, in one line naming the fix:
the config (`check_config`, before torch) and the model (`check_model`, on every rank, before the model is
built); the rank counts are the run's ParallelLayout's (zerokit.train.parallel.layout).
"""

from __future__ import annotations

from zerokit.foundations.errors import UserError
from zerokit.train.ds_settings import DeepSpeedSettings

# The model types DeepSpeed's AutoTP cannot split (AutoTP.supported, deepspeed/module_inject/auto_tp.py):
# their layers are not nn.Linear (GPT-2's Conv1D) or their attention is fused in ways AutoTP does not parse.
AUTOTP_UNSUPPORTED = frozenset({"deberta", "flaubert", "fsmt", "gpt2", "led", "longformer", "xlm", "xlnet"})
# A small fresh Llama that AutoTP splits over 2, 4 or 8 ranks (heads and sizes divide by 8), which the refusal
# of another type suggests: transformers' default Llama config is 6.7B parameters, more than most nodes hold.
SMALL_LLAMA = "hidden_size=256,intermediate_size=688,num_hidden_layers=4,num_attention_heads=8,num_key_value_heads=8"


class LayoutRefused(UserError):
    """A model the ranks cannot split: every rank finds the same after they met, and rank 0 says it."""

    every_rank = True


def check_config(tp_size: int, config_name: str, settings: DeepSpeedSettings | None) -> None:
    """--tp-size against the DeepSpeed config: AutoTP needs DeepSpeed, and ZeRO 0-2; the file must not set it apart."""
    if settings is None:
        if tp_size > 1:
            raise UserError(f"--tp-size {tp_size} needs DeepSpeed (its AutoTP splits the model): drop --config none")
        return
    in_file = settings.autotp_size
    if in_file not in (1, tp_size):
        raise UserError(
            f"DeepSpeed config {settings.path} sets tensor_parallel.autotp_size {in_file}, but --tp-size is {tp_size}: "
            f"remove it from the file and pass --tp-size {in_file}, so the layout is checked before the ranks start"
        )
    if tp_size > 1 and settings.zero_stage == 3:
        raise UserError(
            f"--tp-size {tp_size} with ZeRO-3 (--config {config_name}): the Trainer builds a ZeRO-3 model "
            "through from_pretrained's partitioned path, which refuses tensor parallelism (NotImplementedError); "
            "use ZeRO 0-2, e.g. --config zero2"
        )


def check_model_type(tp_size: int, model_type: str, *, embedded: bool = False, error=UserError) -> None:
    """Whether AutoTP can split models of this type at all; the `train` command asks it before any rank starts
    where the type is known without torch (the embedded default, a GPT-2; --model-type)."""
    if tp_size > 1 and model_type in AUTOTP_UNSUPPORTED:
        default = " (the embedded default model is GPT-2)" if embedded else ""
        raise error(
            f"--tp-size {tp_size}: DeepSpeed's AutoTP cannot split {model_type} models{default}; "
            "train e.g. a Llama, Mistral or Qwen2: --model of that type, or a small fresh Llama, "
            f'--model-type llama --config-overrides "{SMALL_LLAMA}"'
        )


def check_model(tp_size: int, config) -> None:
    """Whether AutoTP can split a model of this (transformers) config evenly over tp_size ranks."""
    if tp_size == 1:
        return
    text = config.get_text_config()
    check_model_type(tp_size, text.model_type, error=LayoutRefused)
    heads = getattr(text, "num_attention_heads", None)
    sizes = {
        "attention heads (num_attention_heads)": heads,
        "key-value heads (num_key_value_heads)": getattr(text, "num_key_value_heads", None) or heads,
        "hidden size (hidden_size)": getattr(text, "hidden_size", None),
    }
    for what, size in sizes.items():
        if size is not None and size % tp_size:
            raise LayoutRefused(
                f"--tp-size {tp_size} does not divide the model's {size} {what}: each rank takes an equal share; "
                f"pick a --tp-size that divides it"
            )
