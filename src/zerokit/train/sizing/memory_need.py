"""What one rank of a training run needs in memory, from numbers alone, and whether a node holds it.

Per parameter, as DeepSpeed's estimators count them (`estimate_zero2_model_states_mem_needs`,
`estimate_zero3_model_states_mem_needs`): the weights in the compute precision (2 bytes in bf16/fp16, 4 in
fp32); the gradients (mixed precision: 2 bytes of 16-bit gradients and 4 of fp32 ones; fp32: 4); an fp32
master copy of the weights (4: ZeRO 1-3 keep one, and mixed precision at any stage); Adam's two moments (8).
ZeRO partitions over the data-parallel ranks: stage 1 the master weights and Adam's moments, stage 2 the
gradients too, stage 3 the weights too. Offloading the optimizer moves the fp32 parts to host memory (cpu) or
disk (nvme, not counted) and leaves no 16-bit gradients on the device; offloading parameters (ZeRO-3) moves the
16-bit weights. Tensor and pipeline parallelism split everything over their ranks first.

Before DeepSpeed partitions anything, every rank builds the whole model in host memory (from a config or
from_pretrained; tensor and pipeline parallelism split it later); under ZeRO-3, zero.Init partitions it as it
is built. On a GPU that copy is freed as the model moves to the device, so the host's peak is the larger of it
and the offloaded states (DeepSpeed's estimator takes the same max); on CPU ranks everything is host memory.

Not counted: activations (they grow with batch and sequence length), communication buckets, the layer ZeRO-3
gathers, CUDA's own context. The need is a floor: a run that does not fit it cannot run.

`Activations` counts what the states leave out, per sample of a training forward and backward, for
`--micro-batch auto` (zerokit.train.sizing.micro_batch): per layer of s tokens, width h and MLP width f, about
s x (20h + 11f) bytes kept for the backward in 16-bit (Korthikanti et al.'s 34sh for f = 4h, plus what GPT-2's tanh
GELU keeps; twice that in fp32), 7 x heads x s^2 more where the attention scores are kept (eager attention; CPU
attention with dropout), and for HF's loss the vocabulary's logits: s x V x (their own bytes + 12: the fp32 upcast,
its log-softmax and their gradient). Measured on CPU in fp32 (GPT-2 and Llama, 4 layers, width 256, 256 tokens,
the RSS peak of a forward and backward of 8 samples, sdpa and eager, dropout on and off) the estimate is 1.1 to 1.8
times the real figure, never below; on the H200, GPT-2 small's 19.6 GiB peak at 16 x 1024 tokens in bf16 leaves
about 1.16 GB a sample beside the states, and the estimate says 1.33.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

GiB = 2**30
CLOSE = 0.85  # a need above this share of what the node has is warned about
MAX_NODES = 1024  # the most nodes a refusal suggests

# The bytes per parameter of each part of the model states, as named in messages.
WEIGHTS, GRADS16, GRADS32, MASTER, ADAM = "weights", "16-bit gradients", "fp32 gradients", "fp32 master", "Adam"


@dataclass(frozen=True)
class Setup:
    """A run's model and layout, in numbers."""

    parameters: int  # the whole model's
    trainable: int  # of those, trained (fewer under --lora or --train-last-layers)
    zero_stage: int  # 0: no ZeRO (or no DeepSpeed)
    precision_bytes: int  # 2: bf16/fp16 mixed precision; 4: fp32
    offload_optimizer: str = "none"  # none, cpu, nvme
    offload_param: str = "none"  # none, cpu, nvme (ZeRO-3 only)
    tp: int = 1
    pp: int = 1
    dp: int = 1  # ZeRO's data-parallel ranks: world / (tp x pp)
    on_gpu: bool = False
    build_bytes: int = 4  # per parameter of the whole copy each rank builds first (fp32: 4)

    def describe(self) -> str:
        precision = {2: "16-bit mixed precision", 4: "fp32"}[self.precision_bytes]
        layout = f"ZeRO-{self.zero_stage}" if self.zero_stage else "no ZeRO"
        offloads = (("optimizer", self.offload_optimizer), ("parameter", self.offload_param))
        offload = [f"{what} offload to {where}" for what, where in offloads if where != "none"]
        parallel = [f"{name} {size}" for name, size in (("TP", self.tp), ("PP", self.pp), ("DP", self.dp))]
        return ", ".join([f"{count(self.parameters)} parameters", layout, precision, *offload, " x ".join(parallel)])


@dataclass(frozen=True)
class Need:
    """Bytes per rank: on its GPU (0 for CPU ranks), and in host memory at its peak; parts: (name, bytes, where)."""

    device: int
    host: int
    parts: tuple[tuple[str, int, str], ...]
    build: int  # the whole copy built in host memory first (0 under ZeRO-3)


@dataclass(frozen=True)
class Node:
    """What a node has: host bytes its ranks may still take, its ranks, this rank's free GPU bytes (None: CPU)."""

    host_available: int
    ranks: int
    device_free: int | None = None


def estimate(setup: Setup) -> Need:
    """The memory one rank needs for the model states (and the first whole copy): see the module's docstring."""
    share = setup.tp * setup.pp
    weights, trained = setup.parameters / share, setup.trainable / share
    mixed = setup.precision_bytes == 2
    offloaded = setup.offload_optimizer != "none"
    states = "host" if setup.offload_optimizer == "cpu" else "disk"

    def per_rank(count: float, stage: int) -> float:
        return count / setup.dp if setup.zero_stage >= stage else count

    parts = [
        (WEIGHTS, per_rank(setup.precision_bytes * weights, 3), _where(setup.offload_param, setup.zero_stage)),
        (GRADS16, per_rank(2 * trained, 2) if mixed and not offloaded else 0, "device"),
        (GRADS32, per_rank(4 * trained, 1 if mixed else 2), "host" if offloaded else "device"),
        (MASTER, per_rank(4 * trained, 1) if mixed or setup.zero_stage else 0, states if offloaded else "device"),
        (ADAM, per_rank(8 * trained, 1), states if offloaded else "device"),
    ]
    parts = [(name, int(size), where) for name, size, where in parts if size]
    build = setup.build_bytes * setup.parameters if setup.zero_stage < 3 else 0
    on_device = sum(size for _, size, where in parts if where == "device")
    on_host = sum(size for _, size, where in parts if where == "host")
    if setup.on_gpu:
        return Need(device=on_device, host=max(build, on_host), parts=tuple(parts), build=build)
    return Need(device=0, host=max(build, on_device + on_host), parts=tuple(parts), build=build)


def _where(offload: str, stage: int) -> str:
    if stage < 3 or offload == "none":
        return "device"
    return "host" if offload == "cpu" else "disk"


@dataclass(frozen=True)
class Verdict:
    """A need against a node: the one line to say, and whether the run is refused (else only warned)."""

    refused: bool
    line: str


def judge(setup: Setup, node: Node, fresh: bool) -> Verdict | None:
    """None when the run fits with room to spare; else a warning (above CLOSE) or a refusal (above all of it).

    fresh: the model is built from a fresh config, so --config-overrides can make it smaller."""
    need = estimate(setup)
    plural = "s" if node.ranks > 1 else ""
    checks = [
        (f"host memory for its {node.ranks} rank{plural} on this node", need.host * node.ranks, node.host_available)
    ]
    if node.device_free is not None:
        checks.append(("memory on this rank's GPU", need.device, node.device_free))
    what, needed, has = max(checks, key=lambda check: check[1] / max(check[2], 1))
    if needed <= CLOSE * has:
        return None
    sums = ", ".join(f"{name} {_gib(size)}" for name, size, where in need.parts if where != "disk")
    built = f"; the whole model is first built in host memory: {_gib(need.build)} GiB" if need.build else ""
    head = f"this run needs at least {_gib(needed)} GiB of {what} ({setup.describe()}; per rank: {sums} GiB{built})"
    if needed <= has:
        share = f"{100 * needed / has:.0f}%"
        return Verdict(False, f"{head}, {share} of the {_gib(has)} GiB it has, before activations (not counted)")
    return Verdict(
        True, f"{head}, and it has {_gib(has)} GiB (activations not counted): {'; or '.join(fixes(setup, node, fresh))}"
    )


def fixes(setup: Setup, node: Node, fresh: bool) -> list[str]:
    """What would fit, checked with the same estimate: ZeRO-3, ZeRO-3 with offload, ZeRO-3 over more nodes."""
    found = []
    zero3 = replace(setup, zero_stage=3, tp=1, pp=1, dp=setup.dp * setup.tp * setup.pp)
    if setup.zero_stage < 3 and _fits(zero3, node):
        found.append("--config zero3 (it partitions the weights too, and builds no whole copy first)")
    offload = replace(zero3, offload_optimizer="cpu", offload_param="cpu")
    if setup.on_gpu and setup.offload_param == "none" and _fits(offload, node):
        found.append("--config zero3-offload (optimizer states and weights in host memory)")
    if not found:
        spreads = [("zero3", zero3)] + ([("zero3-offload", offload)] if setup.on_gpu else [])
        counts = [(_nodes(spread, node), name) for name, spread in spreads]
        nodes, config = min(counts, key=lambda item: item[0] or MAX_NODES + 1)  # the fewest; ZeRO-3 alone at a tie
        if nodes is not None:
            found.append(f"--config {config} over {nodes} nodes like this one ({node.ranks * nodes} ranks)")
        else:
            found.append(f"a smaller model: not even {MAX_NODES} nodes like this one hold it")
    if fresh:
        found.append('a smaller fresh model: --config-overrides "hidden_size=...,num_hidden_layers=..."')
    return found


def _nodes(setup: Setup, node: Node) -> int | None:
    """The fewest nodes like this one (2 or more) over which setup fits; None: more than MAX_NODES."""
    return next((n for n in range(2, MAX_NODES + 1) if _fits(replace(setup, dp=setup.dp * n), node)), None)


def _fits(setup: Setup, node: Node) -> bool:
    need = estimate(setup)
    return need.host * node.ranks <= node.host_available and (
        node.device_free is None or need.device <= node.device_free
    )


def count(parameters: int) -> str:
    """A parameter count as people say it: 6.74B, 124.4M, 52,000."""
    if parameters >= 1e9:
        return f"{parameters / 1e9:.2f}B"
    return f"{parameters / 1e6:.1f}M" if parameters >= 1e6 else f"{parameters:,}"


def _gib(size: float) -> str:
    return f"{size / GiB:.1f}" if size < 100 * GiB else f"{size / GiB:.0f}"


@dataclass(frozen=True)
class Activations:
    """A model's shape and a run's switches: what one sample's training forward and backward keep (see above)."""

    layers: int
    hidden: int
    heads: int
    ffn: int  # the MLP's width
    vocab: int
    tokens: int  # per sample: the block size
    precision_bytes: int  # of an activation: 2 in mixed precision, 4 in fp32
    full_logits: bool = True  # HF's loss; False: --cross-entropy chunked/liger (a chunk at a time)
    scores: bool = False  # the attention scores are kept (eager; CPU attention with dropout)
    checkpointed: bool = False  # --gradient_checkpointing: each layer's input kept, one layer's whole at a time

    def per_sample(self) -> int:
        s, h, scale = self.tokens, self.hidden, self.precision_bytes / 2  # the counts below are 16-bit bytes
        layer = s * (20 * h + 11 * self.ffn) * scale + (7 * self.heads * s * s * scale if self.scores else 0)
        layers = self.layers * s * h * self.precision_bytes + layer if self.checkpointed else self.layers * layer
        ends = 2 * s * h * self.precision_bytes  # the embedding's output and the final norm's
        loss = s * self.vocab * (self.precision_bytes + 12) if self.full_logits else 2 * s * h * self.precision_bytes
        return int(layers + ends + loss)


def largest_batch(room: float, activations: Activations, fixed: int = 0) -> int:
    """The most samples whose activations (and `fixed` bytes besides) fit in room bytes; 0 if not even one."""
    return max(int((room - fixed) // activations.per_sample()), 0)


def still_to_come(need: Need, on_gpu: bool) -> int:
    """The model states a rank's engine adds to the model it has built (its weights): on its GPU, less the 16-bit
    gradients a forward and backward of the bare model make too; on CPU ranks, in host memory."""
    if on_gpu:
        return sum(size for name, size, where in need.parts if where == "device" and name not in (WEIGHTS, GRADS16))
    return sum(size for name, size, where in need.parts if where != "disk" and name != WEIGHTS)
