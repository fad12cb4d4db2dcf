"""A causal LM's training loss without the logits of the whole vocabulary (`train --cross-entropy`).

Why: a causal LM's forward builds `hidden @ lm_head.T` for every position, and HF's ForCausalLMLoss upcasts it
to fp32 before the cross-entropy: for GPT-2 small at 16 x 1024 tokens and a vocabulary of 50,304 that is 1.6 GB
of bf16 logits plus a 3.3 GB fp32 copy, the largest tensors of the step, written and read once each. The loss
needs only each row's log-sum-exp and its target's logit, and the backward only `softmax - onehot`; so
(as Liger-Kernel's fused linear cross-entropy and llm.c's fused classifier do) the rows are taken a chunk at a
time: the chunk's logits (fp32, a few hundred MiB at most), its loss, and at once its gradients with respect
to the hidden states and the head's weight, kept for the backward. The full logits never exist.

- `chunked`: that algorithm in plain torch (any device, CPU ranks included); the loss equals HF's to
  floating-point rounding (a unit test holds it to HF's loss and gradients).
- `liger`: Liger-Kernel's Triton kernel (`liger_kernel`, GPUs only), the same algorithm fused further.

The loss is HF's: labels shifted by one inside (position i predicts label i+1), -100 ignored, a mean over
the counted tokens, or the sum over `num_items_in_batch` when the Trainer gives it (gradient accumulation
weighs every token alike). The patched forward returns no logits while training with labels: a training
step does not read them; evaluation and generation (no labels, or eval mode) take the model's own forward.
"""

from __future__ import annotations

import types
from typing import Any

import torch
from transformers.modeling_outputs import CausalLMOutputWithPast

from zerokit.foundations.errors import UserError

IGNORE = -100
CHUNK_BYTES = 256 * 2**20  # the most one chunk's fp32 logits take


class ChunkedLinearCrossEntropy(torch.autograd.Function):
    """sum over rows of cross_entropy(hidden @ weight.T, targets) / divisor, a chunk of rows at a time; the
    gradients are made in the forward (each chunk's logits are dropped before the next) and scaled in backward."""

    @staticmethod
    def forward(
        ctx: Any, hidden: torch.Tensor, weight: torch.Tensor, targets: torch.Tensor, divisor: torch.Tensor
    ) -> Any:
        rows, vocab = hidden.shape[0], weight.shape[0]
        chunk = max(1, CHUNK_BYTES // (4 * vocab))
        grad_hidden = torch.empty_like(hidden)
        grad_weight = torch.zeros(weight.shape, dtype=torch.float32, device=weight.device)
        total = torch.zeros((), dtype=torch.float32, device=hidden.device)
        head = weight.to(hidden.dtype)  # the same tensor unless autocast left the weight in fp32
        for start in range(0, rows, chunk):
            part, wanted = hidden[start : start + chunk], targets[start : start + chunk]
            logits = (part @ head.T).float()
            counted = wanted != IGNORE
            safe = torch.where(counted, wanted, 0)
            lse = torch.logsumexp(logits, dim=-1)
            total += ((lse - logits.gather(1, safe[:, None])[:, 0]) * counted).sum()
            # d loss / d logits = softmax - onehot, 0 for an ignored row; the softmax from the log-sum-exp already
            # made, in the logits' own memory: one pass over the chunk where torch.softmax makes three and a copy
            grad = logits.sub_(lse[:, None]).exp_()
            grad[torch.arange(len(safe), device=grad.device), safe] -= 1
            low = grad.to(hidden.dtype)  # as the backward through HF's upcast would hand it to lm_head
            # an ignored row's gradient is 0: masked in the narrow tensors (width wide), not in the vocabulary's
            keep = counted[:, None].to(hidden.dtype)
            grad_hidden[start : start + chunk] = (low @ head) * keep
            grad_weight += (low.T @ (part * keep)).float()
        ctx.save_for_backward(grad_hidden, grad_weight.to(weight.dtype))
        ctx.divisor = divisor
        return total / divisor

    @staticmethod
    def backward(ctx: Any, grad_loss: torch.Tensor) -> Any:
        grad_hidden, grad_weight = ctx.saved_tensors
        scale = grad_loss / ctx.divisor
        return grad_hidden * scale.to(grad_hidden.dtype), grad_weight * scale.to(grad_weight.dtype), None, None


def shifted_targets(labels: torch.Tensor) -> torch.Tensor:
    """HF's shift: position i is scored against label i+1, the last position against nothing."""
    return torch.nn.functional.pad(labels, (0, 1), value=IGNORE)[..., 1:].reshape(-1)


def linear_cross_entropy(
    kind: str, hidden: torch.Tensor, weight: torch.Tensor, labels: torch.Tensor, num_items_in_batch: Any = None
) -> torch.Tensor:
    """The causal LM loss of `hidden` (batch, positions, width) under the head `weight` (vocab, width)."""
    targets = shifted_targets(labels).to(hidden.device)
    flat = hidden.reshape(-1, hidden.shape[-1])
    if num_items_in_batch is not None:  # a tensor or a number; never read on the host (no device sync)
        divisor = torch.as_tensor(num_items_in_batch, device=hidden.device, dtype=torch.float32)
    else:
        divisor = (targets != IGNORE).sum().clamp(min=1).float()
    if kind == "liger":
        from liger_kernel.transformers.functional import liger_fused_linear_cross_entropy

        summed = liger_fused_linear_cross_entropy(flat, weight, targets, ignore_index=IGNORE, reduction="sum")
        return summed / divisor
    return ChunkedLinearCrossEntropy.apply(flat, weight, targets, divisor)


def use_fused_loss(model: Any, kind: str) -> None:
    """Patch `model` (a transformers causal LM) so that a training forward with labels computes `kind`'s loss from
    the base model's hidden states and never builds logits; other forwards are the model's own."""
    if kind == "hf":
        return
    base = getattr(model, getattr(model, "base_model_prefix", ""), None)
    head = model.get_output_embeddings() if hasattr(model, "get_output_embeddings") else None
    if base is None or head is None or getattr(head, "bias", None) is not None:
        raise UserError(
            f"--cross-entropy {kind}: {type(model).__name__} has no bias-free output head over a base model: "
            "use --cross-entropy hf"
        )
    if getattr(model.config, "final_logit_softcapping", None):
        raise UserError(f"--cross-entropy {kind}: the model caps its logits (final_logit_softcapping): use hf")
    if kind == "liger" and not torch.cuda.is_available():
        raise UserError("--cross-entropy liger runs on GPUs only (Triton): use --cross-entropy chunked on CPU")
    own_forward = model.forward

    def forward(self: Any, input_ids: Any = None, labels: Any = None, **kwargs: Any) -> Any:
        if labels is None or not self.training:
            return own_forward(input_ids=input_ids, labels=labels, **kwargs)
        num_items = kwargs.pop("num_items_in_batch", None)
        kwargs.pop("return_dict", None)
        outputs = base(input_ids=input_ids, **kwargs)
        hidden = outputs[0]
        loss = linear_cross_entropy(kind, hidden, head.weight, labels, num_items)
        return CausalLMOutputWithPast(loss=loss, logits=None)

    model.forward = types.MethodType(forward, model)
