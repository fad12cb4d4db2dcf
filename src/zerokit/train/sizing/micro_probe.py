"""The torch side of `--micro-batch auto` (zerokit.train.sizing.micro_batch holds the choice and why it is made so).

Once the model is built and the data loaded, every rank: reads the model's shape from its config (the activations a
sample keeps: zerokit.train.sizing.memory_need.Activations); on a GPU, moves the model there in the precision DeepSpeed
would give it (module.bfloat16() or .half(), the rounding its fp32 master copy is made from anyway), and probes a
forward and backward at the largest candidate, beside a ballast of the states the engine will add, halving after
torch.cuda.OutOfMemoryError, each probe's memory freed before the next, the random state as before; on CPU ranks
takes the estimate's largest candidate against its share of the node's memory. The ranks take the smallest choice;
rank 0 says it in one line; the TrainingArguments, and HF's DeepSpeed config that the Trainer fills from them, are
made anew with it (as the Trainer itself does for --auto_find_batch_size).
"""

from __future__ import annotations

import gc
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from zerokit.foundations.errors import UserError
from zerokit.train.options import TrainFlags
from zerokit.train.sizing.global_batch import saved_batch
from zerokit.train.sizing.memory_need import (
    CLOSE,
    Activations,
    GiB,
    Setup,
    estimate,
    largest_batch,
    still_to_come,
)
from zerokit.train.sizing.micro_batch import (
    HEADROOM,
    Choice,
    accumulation_for,
    candidates,
    halving,
    share_of,
)

ATTENTION_DROPOUTS = ("attn_pdrop", "attention_dropout", "attention_probs_dropout_prob")
LOSS_CHUNKS = 3  # a fused loss's chunk, fp32 logits: their softmax and its 16-bit copy besides (fused_loss.CHUNK_BYTES)


@dataclass(frozen=True)
class MicroBatch:
    """What --micro-batch auto chose, and how: recorded in zerokit-run.json ("micro_batch")."""

    micro: int
    accumulation: int
    probed: bool  # True: a forward and backward on each rank's GPU; False: the estimate alone (CPU ranks)
    bound: int  # the most samples the estimate let this rank try (rank 0's)
    too_big: tuple[int, ...]  # the sizes rank 0's probe ran out of memory at, or peaked too high
    kept: str | None  # what fixed the global batch that the accumulation keeps (None: nothing)
    data_parallel: int

    def line(self) -> str:
        batch = self.micro * self.accumulation * self.data_parallel
        how = (
            "a forward and backward probed on each rank's GPU, the smallest fit over ranks"
            + (f"; {', '.join(map(str, self.too_big))} did not fit" if self.too_big else "")
            if self.probed
            else "the memory estimate against this node's host memory, no probe: on CPU ranks running out of memory "
            "brings the OOM killer, not an error that can be caught"
        )
        kept = f", the global batch of {batch} that {self.kept} fixes kept" if self.kept else ""
        return (
            f"zerokit: micro-batch {self.micro} per rank (--micro-batch auto: {how}; the estimate allowed "
            f"{self.bound}); gradient accumulation {self.accumulation}{kept}"
        )

    def as_record(self) -> dict[str, Any]:
        return {
            "chosen": self.micro,
            "accumulation": self.accumulation,
            "how": "probe" if self.probed else "estimate",
            "estimate_bound": self.bound,
            "did_not_fit": list(self.too_big),
            "global_batch_kept_from": self.kept,
        }


def choose_micro_batch(
    options: TrainFlags,
    args: Any,
    model: Any,
    train_data: Any,
    numbers: Setup,
    resume: Path | None,
    accumulation_given: bool,
) -> MicroBatch:
    """Choose, agree, say and apply the micro-batch (every rank calls it, after the model and the data)."""
    import torch

    on_gpu = args.device.type == "cuda"
    activations = model_activations(options, model.config, block_tokens(train_data), args, numbers, on_gpu)
    fixed, source = global_batch_fixed(options, resume)
    if fixed is not None and accumulation_given:
        raise UserError(
            f"{source} fixes the global batch at {fixed}, and --micro-batch auto sets the gradient accumulation that "
            "keeps it: leave out --gradient_accumulation_steps"
        )
    share = share_of(fixed, numbers.dp, source) if fixed is not None else None
    cap = len(train_data) // numbers.dp if hasattr(train_data, "__len__") else sys.maxsize
    fixed_bytes = 0 if activations.full_logits else LOSS_CHUNKS * chunk_bytes()
    search = Search(options, numbers, activations, fixed_bytes, max(cap, 1), share)
    barrier()  # every rank's model is built: the memory each sees is the memory left
    bound, choice = probed(search, args, model) if on_gpu else estimated(search)
    micro = agreed(choice.micro or 0, args.device if on_gpu else torch.device("cpu"))
    if micro == 0:
        raise UserError(nothing_fits(activations, on_gpu))
    accumulation = accumulation_for(fixed, micro, numbers.dp) if fixed is not None else args.gradient_accumulation_steps
    kept = source if fixed is not None else None
    chosen = MicroBatch(micro, accumulation, on_gpu, bound, choice.too_big, kept, numbers.dp)
    rebatch(args, micro, accumulation)
    if args.process_index == 0:
        print(chosen.line(), flush=True)
    return chosen


@dataclass(frozen=True)
class Search:
    """What the choice searches within, on a GPU rank or a CPU one: the run, a sample's activations, the bytes
    every batch adds (a fused loss's chunks), the most samples one rank's data gives (cap), and each rank's share of
    a fixed global batch (None: none is fixed)."""

    options: TrainFlags
    numbers: Setup
    activations: Activations
    fixed_bytes: int
    cap: int
    share: int | None

    def engine_bytes(self, on_gpu: bool) -> int:
        """What the engine still adds on this rank: the model states to come and the ZeRO buckets."""
        states = still_to_come(estimate(self.numbers), on_gpu=on_gpu)
        return states + bucket_bytes(self.options, self.numbers, self.activations.hidden, on_gpu)


def probed(search: Search, args: Any, model: Any) -> tuple[int, Choice]:
    """On this rank's GPU: the estimate's bound against its free memory, then probes from the largest candidate."""
    import torch

    dtype = engine_dtype(args, search.numbers)
    if dtype is None:
        model.to(args.device)
    else:
        model.to(device=args.device, dtype=dtype)
    ballast = search.engine_bytes(on_gpu=True)
    free, total = torch.cuda.mem_get_info(args.device)
    bound = largest_batch(free - (1 - HEADROOM) * total - ballast, search.activations, search.fixed_bytes)
    sizes = candidates(bound, search.cap, search.share)
    return bound, halving(sizes, lambda size: probe(model, size, search.activations, args, ballast, total))


def estimated(search: Search) -> tuple[int, Choice]:
    """On a CPU rank: the largest candidate the estimate lets its share of the node's memory hold (no probe)."""
    from zerokit.train.sizing.memory_check import probe_node

    node = probe_node(False, None)
    engine = search.engine_bytes(on_gpu=False)
    bound = largest_batch(CLOSE * node.host_available / node.ranks - engine, search.activations, search.fixed_bytes)
    return bound, Choice(candidates(bound, search.cap, search.share)[0] if bound >= 1 else None)


def model_activations(
    options: TrainFlags, config: Any, tokens: int, args: Any, numbers: Setup, on_gpu: bool
) -> Activations:
    """The model's shape from its config (the names transformers maps for GPT-2 too), with the run's switches."""
    shape = [getattr(config, name, None) for name in ("num_hidden_layers", "hidden_size", "num_attention_heads")]
    vocab = getattr(config, "vocab_size", None)
    if not all(isinstance(value, int) and value > 0 for value in (*shape, vocab)):
        raise UserError(
            f"--micro-batch auto cannot read the layers, width and heads of this model's config ({config.model_type}): "
            "give --per_device_train_batch_size N"
        )
    layers, hidden, heads = shape
    ffn = getattr(config, "intermediate_size", None) or getattr(config, "n_inner", None) or 4 * hidden
    kernel = options.attn_implementation or getattr(config, "_attn_implementation", None) or "sdpa"
    dropout = max(float(getattr(config, name, 0) or 0) for name in ATTENTION_DROPOUTS)
    mixed = numbers.precision_bytes == 2 or bool(args.bf16 or args.fp16)  # amp without DeepSpeed: 16-bit too
    return Activations(
        layers=layers,
        hidden=hidden,
        heads=heads,
        ffn=ffn,
        vocab=vocab,
        tokens=tokens,
        precision_bytes=2 if mixed else 4,
        full_logits=options.cross_entropy == "hf",
        scores=kernel == "eager" or (not on_gpu and dropout > 0),  # CPU attention keeps them under dropout
        checkpointed=bool(args.gradient_checkpointing),
    )


def block_tokens(train_data: Any) -> int:
    from zerokit.train.data.datasets import block_length

    return block_length(train_data)


def chunk_bytes() -> int:
    from zerokit.train.model.fused_loss import CHUNK_BYTES

    return CHUNK_BYTES


def global_batch_fixed(options: TrainFlags, resume: Path | None) -> tuple[int | None, str]:
    """The global batch this run must keep, and what fixes it: a resumed checkpoint's record, else the config's."""
    saved = saved_batch(resume) if resume else None
    if saved is not None:
        return saved.size, f"checkpoint {resume}"
    settings = options.ds_settings
    if settings is None:
        return None, ""
    return settings.fixed_global_batch, str(settings.path)


def engine_dtype(args: Any, numbers: Setup) -> Any:
    """The precision the model will train in: DeepSpeed's 16-bit (it converts the module so), else the model's own."""
    import torch

    config = getattr(args, "hf_deepspeed_config", None)
    if config is None or numbers.precision_bytes != 2:
        return None
    return torch.bfloat16 if config.is_true("bf16.enabled") else torch.float16


def bucket_bytes(options: TrainFlags, numbers: Setup, hidden: int, on_gpu: bool) -> int:
    """ZeRO-1/2's gradient reduction buckets (two with overlap_comm): whole on a GPU; on CPU ranks only the pages the
    gradients touch are resident."""
    settings = options.ds_settings
    if settings is None or numbers.zero_stage not in (1, 2) or not settings.contiguous_gradients:
        return 0
    size = settings.bucket_sizes.get("reduce_bucket_size", 500_000_000)
    elements = hidden * hidden if size == "auto" else int(size)
    if not on_gpu:
        elements = min(elements, numbers.trainable)
    element_bytes = numbers.precision_bytes if numbers.zero_stage == 2 else 4  # ZeRO-1 stages in fp32
    return elements * element_bytes * (2 if settings.overlap_comm else 1)


def probe(model: Any, size: int, activations: Activations, args: Any, ballast: int, total: int) -> bool:
    """One training forward and backward of `size` samples on this rank's GPU beside `ballast` bytes: whether it ran
    without running out of memory and peaked within HEADROOM of the GPU's `total`. Its memory is freed and the random
    state restored before it returns (the exception's frames too: it is caught, then dropped, then memory freed)."""
    import torch

    device = args.device
    ran, held, ids, loss = False, None, None, None
    torch.cuda.reset_peak_memory_stats(device)
    with torch.random.fork_rng(devices=[device]):
        try:
            held = torch.empty(max(ballast, 0), dtype=torch.uint8, device=device)
            ids = torch.randint(0, activations.vocab, (size, activations.tokens), device=device)
            model.train()
            if args.gradient_checkpointing:
                model.gradient_checkpointing_enable(gradient_checkpointing_kwargs=args.gradient_checkpointing_kwargs)
            with autocast(args, model):
                loss = model(input_ids=ids, labels=ids).loss
            loss.backward()
            torch.cuda.synchronize(device)
            ran = True
        except torch.cuda.OutOfMemoryError:
            pass
    held = ids = loss = None  # noqa: F841 (dropped: the memory below is freed with them)
    peak = torch.cuda.max_memory_allocated(device)
    model.zero_grad(set_to_none=True)
    gc.collect()
    torch.cuda.empty_cache()
    torch.cuda.reset_peak_memory_stats(device)
    return ran and peak <= HEADROOM * total


def autocast(args: Any, model: Any) -> Any:
    """The Trainer's amp where it would use it (16-bit flags without DeepSpeed, the weights in fp32)."""
    import contextlib

    import torch

    if args.deepspeed or not (args.bf16 or args.fp16) or next(model.parameters()).dtype != torch.float32:
        return contextlib.nullcontext()
    return torch.autocast("cuda", dtype=torch.bfloat16 if args.bf16 else torch.float16)


def barrier() -> None:
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        dist.barrier()


def agreed(micro: int, device: Any) -> int:
    """The smallest micro-batch any rank chose (0: some rank fits none)."""
    import torch
    import torch.distributed as dist

    if not (dist.is_available() and dist.is_initialized()):
        return micro
    value = torch.tensor([micro], dtype=torch.int64, device=device)
    dist.all_reduce(value, op=dist.ReduceOp.MIN)
    return int(value.item())


def nothing_fits(activations: Activations, on_gpu: bool) -> str:
    where = "a rank's GPU beside the model states still to come" if on_gpu else "this node's host memory"
    sample = activations.per_sample() / GiB
    return (
        f"--micro-batch auto: not even a micro-batch of 1 fits {where} (one sample of {activations.tokens} tokens "
        f"keeps about {sample:.2f} GiB): --gradient_checkpointing, --cross-entropy chunked, a shorter --block-size, "
        "or a config that partitions more (--config zero3 with --per_device_train_batch_size 1)"
    )


def rebatch(args: Any, micro: int, accumulation: int) -> None:
    """TrainingArguments with this micro-batch and accumulation, and HF's DeepSpeed config filled from them anew (its
    "auto" batch sizes were filled from the flags when the arguments were made)."""
    args.per_device_train_batch_size = micro
    args.gradient_accumulation_steps = accumulation
    if args.deepspeed:
        from accelerate.utils import DeepSpeedPlugin
        from transformers.integrations.deepspeed import HfTrainerDeepSpeedConfig

        args.hf_deepspeed_config = HfTrainerDeepSpeedConfig(args.deepspeed)
        args.hf_deepspeed_config.trainer_config_process(args)
        args.deepspeed_plugin = DeepSpeedPlugin(hf_ds_config=args.hf_deepspeed_config)
