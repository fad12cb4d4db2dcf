"""A Hugging Face causal LM as a list of pipeline layers: embedding, one layer per block, final norm, head.

DeepSpeed's pipeline engine cuts a model between layers of a flat list, and only a hidden-state tensor
travels between stages. This module writes the two families it supports in that form, reusing the
model's own submodules (so a pretrained model's weights train as they are) and its own loss function:

- the Llama family (Llama, Mistral, Qwen2, ...: `model.embed_tokens`, `model.layers`, `model.norm`,
  `model.rotary_emb`, `lm_head`): each block computes its rotary `cos`/`sin` and causal mask itself
  (they are cheap; passed between stages, DeepSpeed's backward would need them to require grad);
- GPT-2 (`transformer.wte`, `wpe`, `h`, `ln_f`; `lm_head` tied to `wte`).

A tied head (`tie_word_embeddings`) is the embedding's weight used again in the last stage: a
TiedLayerSpec, whose gradients DeepSpeed adds up across the two stages. Blocks are packed text (no
padding), so the causal mask is the whole attention mask. Each layer names where its parameters live in
the Hugging Face model (`hf_prefixes`), so the stages' weights are saved back as one ordinary model.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import nn
from transformers.masking_utils import create_causal_mask

from zerokit.foundations.errors import UserError

TIED_KEY = "embedding"  # the TiedLayerSpec key of a tied input embedding and output head
SUPPORTED = "the Llama family (llama, mistral, qwen2, ...) and gpt2"


class PipelineRefused(UserError):
    """A model the pipeline cannot be built from: every rank finds the same, rank 0 says it."""

    every_rank = True


@dataclass
class PipeLayer:
    """One entry of the layer list: a module, the HF names of its parameters, and how it is tied."""

    module: nn.Module
    hf_prefixes: dict[str, str]  # this module's attribute -> that submodule's name in the HF model
    tied: bool = False  # the embedding shared with the head (first use: forward; second use: head_forward)
    head: bool = False  # the second use of the tied embedding: logits from its weight
    is_block: bool = False  # a decoder block: the stages are cut between blocks, balanced by their count

    def hf_state(self) -> dict[str, torch.Tensor]:
        """This layer's parameters under their Hugging Face names."""
        state = {}
        for name, tensor in self.module.state_dict().items():
            attribute, _, rest = name.partition(".")
            if attribute in self.hf_prefixes:
                state[f"{self.hf_prefixes[attribute]}.{rest}"] = tensor
        return state


def head_forward(module: nn.Module, hidden: torch.Tensor) -> torch.Tensor:
    """The tied head: logits from the input embedding's weight (module is a TokenEmbedding)."""
    return nn.functional.linear(hidden, module.embed.weight)


def positions(hidden: torch.Tensor) -> torch.Tensor:
    """The position ids of a packed block: 0 .. length-1 (no padding, no cache), shape (1, length)."""
    return torch.arange(hidden.shape[1], device=hidden.device).unsqueeze(0)


class TokenEmbedding(nn.Module):
    """input ids -> token embeddings (Llama's embed_tokens, GPT-2's wte)."""

    def __init__(self, embed: nn.Embedding) -> None:
        super().__init__()
        self.embed = embed

    def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
        return self.embed(input_ids)


class PositionEmbedding(nn.Module):
    """GPT-2: add the learned position embedding, then the embedding dropout."""

    def __init__(self, wpe: nn.Embedding, drop: nn.Module) -> None:
        super().__init__()
        self.wpe = wpe
        self.drop = drop

    def forward(self, hidden: torch.Tensor) -> torch.Tensor:
        return self.drop(hidden + self.wpe(positions(hidden)))


class PipelineBlock(nn.Module):
    """One decoder block on a hidden-state tensor, its causal mask (and rotary embedding) made here."""

    def __init__(self, block: nn.Module, config, rotary: nn.Module | None) -> None:
        super().__init__()
        self.block = block
        self.rotary = rotary  # Llama family: its buffers only (inv_freq is not saved)
        self.config = config

    def forward(self, hidden: torch.Tensor) -> torch.Tensor:
        ids = positions(hidden)
        mask = create_causal_mask(
            config=self.config, inputs_embeds=hidden, attention_mask=None, past_key_values=None, position_ids=ids
        )
        if self.rotary is None:  # GPT-2
            out = self.block(hidden, None, mask, position_ids=ids)
        else:
            out = self.block(
                hidden, attention_mask=mask, position_ids=ids, position_embeddings=self.rotary(hidden, ids)
            )
        return out[0] if isinstance(out, tuple) else out


class Norm(nn.Module):
    def __init__(self, norm: nn.Module) -> None:
        super().__init__()
        self.norm = norm

    def forward(self, hidden: torch.Tensor) -> torch.Tensor:
        return self.norm(hidden)


class Head(nn.Module):
    """An untied output projection."""

    def __init__(self, lm_head: nn.Linear) -> None:
        super().__init__()
        self.lm_head = lm_head

    def forward(self, hidden: torch.Tensor) -> torch.Tensor:
        return self.lm_head(hidden)


def pipeline_layers(model) -> list[PipeLayer]:
    """model (an AutoModelForCausalLM) as a flat layer list; PipelineRefused for another architecture."""
    config = model.config
    tied = bool(getattr(config, "tie_word_embeddings", False))
    if hasattr(model, "model") and all(
        hasattr(model.model, a) for a in ("embed_tokens", "layers", "norm", "rotary_emb")
    ):
        base, prefix = model.model, "model"
        embed, blocks, norm, rotary = base.embed_tokens, base.layers, base.norm, base.rotary_emb
        first = [PipeLayer(TokenEmbedding(embed), {"embed": f"{prefix}.embed_tokens"}, tied=tied)]
        block_prefix = f"{prefix}.layers"
        norm_name = f"{prefix}.norm"
    elif hasattr(model, "transformer") and all(hasattr(model.transformer, a) for a in ("wte", "wpe", "h", "ln_f")):
        base, prefix = model.transformer, "transformer"
        embed, blocks, norm, rotary = base.wte, base.h, base.ln_f, None
        first = [
            PipeLayer(TokenEmbedding(embed), {"embed": f"{prefix}.wte"}, tied=tied),
            PipeLayer(PositionEmbedding(base.wpe, base.drop), {"wpe": f"{prefix}.wpe"}),
        ]
        block_prefix = f"{prefix}.h"
        norm_name = f"{prefix}.ln_f"
    else:
        raise PipelineRefused(
            f"--pp-size: zerokit cannot cut a {config.model_type} model ({type(model).__name__}) into pipeline "
            f"stages; it can cut {SUPPORTED}: train another model, or drop --pp-size"
        )
    layers = [*first]
    for index, block in enumerate(blocks):
        layers.append(
            PipeLayer(PipelineBlock(block, config, rotary), {"block": f"{block_prefix}.{index}"}, is_block=True)
        )
    layers.append(PipeLayer(Norm(norm), {"norm": norm_name}))
    if tied:
        layers.append(PipeLayer(first[0].module, first[0].hf_prefixes, tied=True, head=True))
    else:
        layers.append(PipeLayer(Head(model.lm_head), {"lm_head": "lm_head"}))
    return layers


def loss_function(model) -> Callable[[torch.Tensor, torch.Tensor], torch.Tensor]:
    """The model's own causal-LM loss (labels shifted inside), as (logits, labels) -> loss."""
    hf_loss = model.loss_function
    vocab_size = model.config.get_text_config().vocab_size

    def causal_lm_loss(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        return hf_loss(logits, labels, vocab_size)

    return causal_lm_loss


def deepspeed_layers(layers: list[PipeLayer]) -> list:
    """The list PipelineModule takes: modules, and the tied embedding as TiedLayerSpecs of one key."""
    from deepspeed.pipe import TiedLayerSpec

    out: list = []
    for layer in layers:
        if layer.tied:
            forward = head_forward if layer.head else None
            out.append(
                TiedLayerSpec(
                    TIED_KEY, TokenEmbedding, layer.module.embed, forward_fn=forward, tied_weight_attr=["embed.weight"]
                )
            )
        else:
            out.append(layer.module)
    return out
