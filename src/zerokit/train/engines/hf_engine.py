"""The engine of a run without `--pp-size`: the HF Trainer (zerokit.train.engines.hf_trainer's ZerokitTrainer), ZeRO and
AutoTP."""

from __future__ import annotations

import contextlib

from zerokit.train.training_run import TrainingRun, perplexity


class TrainerEngine:
    """A TrainingRun's Engine: the Trainer's train, save_model and evaluate, and the metrics files they write."""

    def __init__(self, run: TrainingRun) -> None:
        from transformers import default_data_collator

        from zerokit.foundations.startup_marks import mark
        from zerokit.train.callbacks.finite_loss import FiniteLossGuard
        from zerokit.train.engines.hf_trainer import ZerokitTrainer
        from zerokit.train.parallel.sequence_parallel import collate

        self.resume = run.resume
        self.trainer = ZerokitTrainer(
            loss_guard=FiniteLossGuard(),
            model=run.model,
            args=run.args,
            train_dataset=run.datasets["train"],
            eval_dataset=run.datasets["validation"],
            processing_class=run.tokenizer,
            data_collator=default_data_collator if run.layout.sp == 1 else collate(run.layout.sp),
            callbacks=run.callbacks,
            saves=run.saves,
            memory=run.memory,
        )
        mark("trainer")

    def train(self) -> dict[str, float]:
        import torch

        try:
            result = self.trainer.train(resume_from_checkpoint=str(self.resume) if self.resume else None)
        except BaseException:
            with contextlib.suppress(Exception):  # the checkpoint being written, published if whole; the error stays
                self.trainer.wait_for_writes()
            raise
        if torch.cuda.is_available():  # this rank's peak (rank 0's is the one saved); `smoke` reports it
            result.metrics["peak_gpu_memory_bytes"] = torch.cuda.max_memory_allocated()
        return result.metrics

    def save_final(self, metrics: dict[str, float]) -> None:
        self.trainer.save_model()
        self.trainer.log_metrics("train", metrics)
        self.trainer.save_metrics("train", metrics)
        self.trainer.save_state()

    def evaluate(self) -> dict[str, float] | None:
        if self.trainer.eval_dataset is None:  # streaming a source without a validation split
            return None
        metrics = self.trainer.evaluate()
        metrics["perplexity"] = perplexity(metrics["eval_loss"])
        self.trainer.log_metrics("eval", metrics)
        self.trainer.save_metrics("eval", metrics)
        return metrics
