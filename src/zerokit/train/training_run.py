"""One training run: what it carries (`TrainingRun`) and its lifecycle, written once for both engines.

`train()` (zerokit.train.run) builds the run; an `Engine` trains it: the HF Trainer
(zerokit.train.engines.hf_engine) or, under `--pp-size`, DeepSpeed's pipeline engine
(zerokit.train.engines.pipeline_engine). `TrainingRun.execute` is what both share: rank 0 says the notes, the start line
and the layout; the engine trains, saves the final model and evaluates; the adapter is merged (`--merge`), the output
record finished, and the ranks leave the process group, after a preemption's checkpoint or a RunFailure too.
"""

from __future__ import annotations

import math
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from zerokit.foundations.errors import EndOfRunFailure, RunFailure
from zerokit.foundations.process_end import keep_until_exit
from zerokit.train.options import TrainFlags
from zerokit.train.parallel.layout import ParallelLayout

if TYPE_CHECKING:
    from transformers import PreTrainedModel, PreTrainedTokenizerBase, TrainerCallback, TrainingArguments

    from zerokit.outputs.ownership import OutputRecord
    from zerokit.train.callbacks.preemption import PreemptionCallback
    from zerokit.train.checkpoints.node_copies.saver import MemoryPlan
    from zerokit.train.checkpoints.writer import SaveLog


def perplexity(eval_loss: float) -> float:
    """exp(eval_loss), inf where that overflows a float."""
    return math.exp(eval_loss) if eval_loss < 700 else math.inf


class Engine(Protocol):
    """What trains a TrainingRun; every rank calls each method, in this order."""

    def train(self) -> dict[str, float]:
        """Train from the resumed step (or 0) to the last, or to a preemption's checkpoint: the train metrics."""
        ...

    def save_final(self, metrics: dict[str, float]) -> None:
        """The final model, the train metrics and the trainer state, in the output folder."""
        ...

    def evaluate(self) -> dict[str, float] | None:
        """The final validation metrics (eval_loss, perplexity), logged and written; None without validation data."""
        ...


@dataclass
class TrainingRun:
    """What one rank's run carries from its set-up (zerokit.train.run) to its engine."""

    options: TrainFlags
    args: TrainingArguments
    model: PreTrainedModel
    tokenizer: PreTrainedTokenizerBase
    datasets: dict[str, Any]  # "train", "validation" (None: a streamed source without one): blocks of tokens
    layout: ParallelLayout
    resume: Path | None  # the checkpoint it resumes from
    start: str  # the start line: where the run starts (and the fresh model it makes)
    notes: list[str]  # said once, on rank 0: e.g. the incomplete checkpoints --resume skipped
    callbacks: list[TrainerCallback]  # what a Trainer would get: preemption, the run record, bench's step clock
    record: OutputRecord | None  # the output folder's record, on rank 0; None on the others
    preemption: PreemptionCallback | None  # None where bench runs without it
    saves: SaveLog | None = None  # what each checkpoint cost, and how they are written (--checkpoint-write)
    memory: MemoryPlan | None = None  # --memory-checkpoints (zerokit.train.checkpoints.node_copies.saver)

    def execute(self, engine: Callable[[TrainingRun], Engine]) -> int:
        """Build the engine, train, save and evaluate: the exit code (a preemption's once its checkpoint is written)."""
        rank0 = self.args.process_index == 0
        if rank0:
            for note in self.notes:
                print(f"zerokit: {note}", file=sys.stderr, flush=True)
            print(self.start, flush=True)
        try:
            built = engine(self)
            keep_until_exit(built)  # it holds the process group: never freed under the GIL (foundations.process_end)
            if rank0:
                batch = self.args.per_device_train_batch_size, self.args.gradient_accumulation_steps
                print(self.layout.describe(*batch), flush=True)
            metrics = built.train()
            if self.preemption is not None and self.preemption.preempted:
                shutdown_distributed()  # the checkpoint is written; the job script requeues on REQUEUE_EXIT_CODE
                return self.preemption.exit_code
            output = self.options.output_dir
            saved = f"the final model is saved in {output}"
            after_training("final save", lambda: built.save_final(metrics), lambda: last_checkpoint(output))
            after_training("evaluation", built.evaluate, lambda: saved)
            if self.options.merge and self.args.should_save:
                after_training("adapter merge", self.merge_adapter, lambda: f"the adapter is saved in {output}")
            if self.record is not None:
                from zerokit.outputs import ownership

                record = self.record
                after_training("run record", lambda: ownership.finish(output, record), lambda: saved)
        except RunFailure:
            shutdown_distributed(barrier=False)  # every rank got here, or the launcher stops the rest
            raise
        shutdown_distributed()
        return 0

    def merge_adapter(self) -> None:
        """--merge: the LoRA adapter merged into its base, in the output folder's merged/."""
        from transformers.integrations.deepspeed import unset_hf_deepspeed_config

        from zerokit.train.model.lora import merge_adapter

        unset_hf_deepspeed_config()  # the base is loaded whole, not partitioned by ZeRO-3
        output = self.options.output_dir
        merge_adapter(self.options.model, str(output), str(output / "merged"))


def after_training(part: str, action: Callable[[], object], kept: Callable[[], str]) -> None:
    """A part of the run's end (END_OF_RUN_EXIT_CODES): whatever it raises, the user reads one line saying what
    failed and what was kept (`kept()`, read then), not a rank's traceback after hours of training, and the exit
    code names the part."""
    try:
        action()
    except EndOfRunFailure:
        raise
    except Exception as error:  # any fault of the end, after the work: said in one line
        said = " ".join(str(error).split())[:300] or type(error).__name__
        raise EndOfRunFailure(part, f"training finished, then the {part} failed ({said}); {kept()}") from error


def last_checkpoint(output: Path) -> str:
    """What a failed final save leaves: the newest whole checkpoint, named."""
    from zerokit.outputs.checkpoints import newest_complete_checkpoint

    newest = newest_complete_checkpoint(output)
    if newest is None:
        return "no checkpoint was kept (--save_steps N keeps some): the run must start again"
    return f"the last checkpoint, {newest}, is kept: --resume auto resumes from it"


def shutdown_distributed(barrier: bool = True) -> None:
    """Leave the process group cleanly; gloo aborts at exit under MPI otherwise."""
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        if barrier:
            dist.barrier()
        dist.destroy_process_group()
