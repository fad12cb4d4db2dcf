"""`--pp-size N`: DeepSpeed's pipeline engine, the model cut into N stages x ZeRO-1 data parallelism across them.

Ranks are laid out as DeepSpeed's PipeDataParallelTopology lays them out: stage s holds ranks
s*DP .. s*DP+DP-1, so consecutive ranks are data-parallel replicas of one stage and a stage boundary
falls between nodes when DP is the ranks per node (activations cross nodes, gradients stay in one).
Pipeline runs train with the engine's own `train_batch` loop (zerokit.train.pipeline_run), not the
Trainer; the layouts and options that loop cannot serve are refused here first, in one line naming the
fix: the options (`check_options`, before torch) and the rank counts (`check_ranks`, before any rank
starts and again in each rank).
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from zerokit.foundations.errors import UserError


@dataclass(frozen=True)
class PipeLayout:
    """pp pipeline stages x dp data-parallel replicas of each."""

    pp: int
    dp: int

    def describe(self, micro_batch: int, micro_batches: int) -> str:
        """The start-up line: the layout and the global batch it makes (samples per optimizer step)."""
        ranks = self.pp * self.dp
        line = (
            f"zerokit: {ranks} rank{'s' if ranks > 1 else ''} = pipeline {self.pp} stage{'s' if self.pp > 1 else ''} "
            f"x data parallel {self.dp}; global batch {micro_batch * micro_batches * self.dp} = {micro_batch} per "
            f"micro-batch x {micro_batches} micro-batches per step (--gradient_accumulation_steps) x {self.dp} "
            "data-parallel"
        )
        if self.pp > 1 and micro_batches < self.pp:
            line += (
                f"; with {micro_batches} micro-batch{'es' if micro_batches > 1 else ''} per step the {self.pp} stages "
                f"mostly wait on each other: --gradient_accumulation_steps {self.pp * 2} or more fills the pipeline"
            )
        return line

    def as_record(self) -> dict[str, int]:
        return {"pp_size": self.pp, "dp_size": self.dp}


# zerokit options the pipeline loop does not serve: flag -> whether it is given.
UNSERVED = {
    "--tp-size": lambda o: o.tp_size > 1,
    "--lora": lambda o: o.lora is not None,
    "--train-last-layers": lambda o: bool(o.train_last_layers),
    "--streaming": lambda o: o.streaming,
}


def check_options(options) -> None:
    """--pp-size against the other options and the DeepSpeed config (TrainOptions; before torch)."""
    pp = options.pp_size
    if pp is None:
        return
    for name, given in UNSERVED.items():
        if given(options):
            raise UserError(f"--pp-size {pp} with {name}: pipeline runs do not take {name} yet; drop one of them")
    if options.ds_config is None:
        raise UserError(f"--pp-size {pp} needs DeepSpeed (its pipeline engine trains the stages): --config zero1")
    config = json.loads(options.ds_config.read_text())
    stage = (config.get("zero_optimization") or {}).get("stage", 0)
    if stage != 1:
        raise UserError(
            f"--pp-size {pp} with ZeRO-{stage} (--config {options.config}): DeepSpeed's pipeline engine refuses "
            "ZeRO-2 and 3, and at ZeRO-0 its gradient clipping leaves the other stages' gradients out; "
            "use --config zero1 (or a file with zero_optimization.stage 1)"
        )


def check_ranks(pp_size: int | None, world: int, source: str) -> PipeLayout | None:
    """The layout of world ranks in pp_size stages (None without --pp-size); source names where the count came from."""
    if pp_size is None:
        return None
    if world % pp_size:
        raise UserError(
            f"--pp-size {pp_size} does not divide the {world} ranks ({source}): each stage needs the same number "
            f"of data-parallel ranks; pick a --pp-size that divides {world}"
        )
    return PipeLayout(pp=pp_size, dp=world // pp_size)
