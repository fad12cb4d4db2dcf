"""How a run's ranks divide: tp x sp x pp x dp (torchtitan's ParallelDims), checked once against the world.

Tensor parallelism (`--tp-size`, zerokit.train.parallel.tensor_parallel) puts tp consecutive ranks in a group;
sequence parallelism (`--sp-size`, zerokit.train.parallel.sequence_parallel) sp consecutive ranks, who share a batch;
pipeline parallelism (`--pp-size`, zerokit.train.parallel.pipeline_parallel) puts dp consecutive ranks in a stage. `pp`
is None without `--pp-size`: the Trainer trains; with it, even `--pp-size 1`, DeepSpeed's pipeline engine does
(and tp is 1: `pipeline_parallel.check_options` refuses `--tp-size` with it). A layout the ranks cannot take is
refused in one line naming the fix, before torch (zerokit.train.cli).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from zerokit.foundations.errors import UserError


@dataclass(frozen=True)
class ParallelLayout:
    """tp ranks per tensor-parallel group x sp per sequence-parallel group x pp pipeline stages (None: no pipeline
    engine) x dp data-parallel ranks."""

    tp: int = 1
    pp: int | None = None
    dp: int = 1
    sp: int = 1

    @property
    def model_parallel(self) -> int:
        """The ranks that share one stream of batches: those of a data-parallel replica."""
        return self.tp * self.sp * (self.pp or 1)

    @property
    def world(self) -> int:
        return self.model_parallel * self.dp

    @classmethod
    def check(
        cls, world: int, per_node: int, source: str, *, tp: int = 1, pp: int | None = None, sp: int = 1
    ) -> ParallelLayout:
        """The layout of world ranks, per_node on each node, in groups of tp and pp stages; source names where the
        counts came from (the flag or the variables) for the one-line refusal.

        A plain UserError, which every rank prints: in the ranks this runs before they meet, and a rank that is
        still starting when launch stops the others on the first one's exit would never print an every-rank error.
        """
        if tp > 1:
            _check_enough_ranks("--tp-size", tp, world)
            if per_node % tp:
                raise UserError(
                    f"--tp-size {tp} does not divide the {per_node} ranks per node ({source}): a tensor-parallel "
                    f"group must lie within one node; pick a --tp-size that divides {per_node}"
                )
            _check_divides("--tp-size", tp, world, source)
        if sp > 1:
            _check_enough_ranks("--sp-size", sp, world)
            _check_divides("--sp-size", sp, world, source)
        if pp is not None and world % (tp * pp):
            raise UserError(
                f"--pp-size {pp} does not divide the {world} ranks ({source}): each stage needs the same number "
                f"of data-parallel ranks; pick a --pp-size that divides {world}"
            )
        return cls(tp=tp, pp=pp, dp=world // (tp * sp * (pp or 1)), sp=sp)

    def describe(self, micro_batch: int, accumulation: int) -> str:
        """The start-up line: the layout and the global batch it makes (samples per optimizer step)."""
        ranks = self.world
        plural = "s" if ranks > 1 else ""
        batch = micro_batch * accumulation * self.dp
        if self.sp > 1:
            return (
                f"zerokit: {ranks} ranks = sequence parallel {self.sp} x data parallel {self.dp}; global batch {batch} "
                f"= {micro_batch} per group x {self.dp} data-parallel x {accumulation} accumulation (the {self.sp} "
                f"ranks of a group share a batch, each 1/{self.sp} of its tokens)"
            )
        if self.pp is None:
            shared = f" (the {self.tp} ranks of a group share a batch)" if self.tp > 1 else ""
            return (
                f"zerokit: {ranks} rank{plural} = tensor parallel {self.tp} x data parallel {self.dp}; "
                f"global batch {batch} = {micro_batch} per rank x {self.dp} data-parallel x {accumulation} "
                f"accumulation{shared}"
            )
        line = (
            f"zerokit: {ranks} rank{plural} = pipeline {self.pp} stage{'s' if self.pp > 1 else ''} "
            f"x data parallel {self.dp}; global batch {batch} = {micro_batch} per micro-batch x {accumulation} "
            f"micro-batches per step (--gradient_accumulation_steps) x {self.dp} data-parallel"
        )
        if self.pp > 1 and accumulation < self.pp:
            line += (
                f"; with {accumulation} micro-batch{'es' if accumulation > 1 else ''} per step the {self.pp} stages "
                f"mostly wait on each other: --gradient_accumulation_steps {self.pp * 2} or more fills the pipeline"
            )
        return line

    def as_record(self) -> dict[str, int]:
        """zerokit-run.json's "parallelism" (and a pipeline checkpoint's layout file): the sizes this engine has."""
        if self.sp > 1:
            return {"sp_size": self.sp, "dp_size": self.dp}
        if self.pp is None:
            return {"tp_size": self.tp, "dp_size": self.dp}
        return {"pp_size": self.pp, "dp_size": self.dp}


def _check_enough_ranks(flag: str, size: int, world: int) -> None:
    """A group of size ranks in a run of one: refused, naming the --nproc-per-node that makes one."""
    if world == 1:
        raise UserError(f"{flag} {size} needs {size} ranks at least, this run has 1: add --nproc-per-node {size}")


def _check_divides(flag: str, size: int, world: int, source: str) -> None:
    """Groups of size ranks that do not fill the world evenly: refused, naming where the world came from."""
    if world % size:
        raise UserError(
            f"{flag} {size} does not divide the {world} ranks ({source}): pick a {flag} that divides {world}"
        )


def refuse_unserved(flag: str, size: int, unserved: dict[str, Callable[[Any], bool]], options: Any, runs: str) -> None:
    """The first option in unserved (flag -> whether options give it) that runs of this kind do not take yet."""
    for name, given in unserved.items():
        if given(options):
            raise UserError(f"{flag} {size} with {name}: {runs} do not take {name} yet; drop one of them")
