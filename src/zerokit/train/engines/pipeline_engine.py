"""One rank of a `--pp-size` run: DeepSpeed's pipeline engine and its `train_batch` loop, the run's Engine.

The Trainer cannot drive a PipelineEngine (it feeds whole batches to one module), so this loop does
what the Trainer does for `train` (zerokit.train.engines.hf_engine), with the same files and the same guarantees,
inside the lifecycle both share (zerokit.train.training_run):

- the model is built whole on every rank (same seed, or from_pretrained), cut into pipeline layers
  (zerokit.train.engines.pipeline_layers) and each rank keeps its stage's;
- the DeepSpeed config is the Trainer's (HF fills its "auto" values from the TrainingArguments), with
  the batch sizes of the pipeline layout: micro-batch x micro-batches per step x data-parallel replicas;
- each replica reads its share of the blocks in a seeded order that depends only on the step, so a
  resumed run reads on where the first stopped; the first and last stage of a replica read the same;
- losses, learning rate and gradient norm are logged as the Trainer logs them (trainer_state.json's
  log_history); a NaN/inf loss stops the run before it saves; SIGTERM/SIGUSR1/SIGINT checkpoint at the
  step's end (zerokit.train.callbacks.preemption, the same callback);
- a checkpoint is DeepSpeed's (a file per layer, ZeRO-1 shards) plus the whole model as an ordinary HF
  folder, written into `tmp-checkpoint-N` and published whole (zerokit.outputs.checkpoints);
- the final model is one HF folder (model.safetensors) that `generate` and from_pretrained load.
"""

from __future__ import annotations

import math
import shutil
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import torch
import torch.distributed as dist
from transformers.trainer_callback import CallbackHandler, DefaultFlowCallback

from zerokit.foundations.files import write_json
from zerokit.launch.rank.progress import heartbeat
from zerokit.outputs.checkpoints import PIPELINE_NAME, PREFIX, STAGING_PREFIX, publish, rotate
from zerokit.train.engines.pipeline_layers import (
    PipeLayer,
    PipelineRefused,
    deepspeed_layers,
    loss_function,
    pipeline_layers,
)
from zerokit.train.parallel.layout import ParallelLayout
from zerokit.train.training_run import TrainingRun, perplexity

STAGES_FOLDER = "tmp-stages"  # each stage's weights under their HF names, merged into model.safetensors


def micro_batches(dataset, micro: int, dp: int, dp_rank: int, seed: int, start: int) -> Iterator[tuple]:
    """This replica's micro-batches (input_ids, labels) in a seeded order, from micro-batch number start on.

    Every epoch is a permutation of the blocks (seed + epoch) dealt out to the dp replicas; the order
    depends on nothing but the seed, so a resume skips `start` micro-batches without reading them.
    """
    from torch.utils.data import DistributedSampler

    per_epoch = len(dataset) // dp // micro
    epoch, skip = divmod(start, per_epoch)
    while True:
        sampler = DistributedSampler(dataset, num_replicas=dp, rank=dp_rank, shuffle=True, seed=seed, drop_last=True)
        sampler.set_epoch(epoch)
        order = list(sampler)
        for first in range(skip * micro, per_epoch * micro, micro):
            rows = dataset[order[first : first + micro]]
            yield torch.tensor(rows["input_ids"]), torch.tensor(rows["labels"])
        epoch, skip = epoch + 1, 0


def resolved_ds_config(args, model, layout: ParallelLayout, max_steps: int) -> dict:
    """The run's DeepSpeed config: "auto" values filled as the Trainer fills them; the pipeline's batch sizes."""
    hf_config = args.hf_deepspeed_config
    hf_config.trainer_config_finalize(args, model, max_steps)
    config = hf_config.config
    micro, accumulation = args.per_device_train_batch_size, args.gradient_accumulation_steps
    config.update(
        train_micro_batch_size_per_gpu=micro,
        gradient_accumulation_steps=accumulation,
        train_batch_size=micro * accumulation * layout.dp,
    )
    return config


def optimizer_and_schedule(args, config: dict, parameters: list, max_steps: int):
    """What deepspeed.initialize gets besides the config: the config's optimizer and scheduler when it has them,
    else the Trainer's (torch AdamW; args.lr_scheduler_type with its warmup)."""
    from transformers import get_scheduler

    optimizer = None
    if "optimizer" not in config:
        optimizer = torch.optim.AdamW(
            parameters,
            lr=args.learning_rate,
            betas=(args.adam_beta1, args.adam_beta2),
            eps=args.adam_epsilon,
            weight_decay=args.weight_decay,
        )
    schedule = None
    if "scheduler" not in config:

        def schedule(opt):
            warmup = args.get_warmup_steps(max_steps)
            return get_scheduler(args.lr_scheduler_type, opt, num_warmup_steps=warmup, num_training_steps=max_steps)

    return optimizer, schedule


def plan_steps(args, train_blocks: int, layout: ParallelLayout) -> int:
    """--max_steps, or the steps of num_train_epochs over this layout's micro-batches."""
    micro = args.per_device_train_batch_size
    per_epoch = train_blocks // layout.dp // micro
    if per_epoch == 0:
        raise PipelineRefused(
            f"--pp-size: {train_blocks} training blocks do not make one micro-batch of {micro} for each of the "
            f"{layout.dp} data-parallel replicas: give more text, or a smaller --per_device_train_batch_size"
        )
    if args.max_steps > 0:
        return args.max_steps
    return max(1, math.ceil(args.num_train_epochs * per_epoch / args.gradient_accumulation_steps))


class PipelineRun:
    """A TrainingRun's Engine under --pp-size: DeepSpeed's engine and what this rank owns of the model; `train`
    runs the loop."""

    def __init__(self, run: TrainingRun) -> None:
        import deepspeed
        from deepspeed.pipe import PipelineModule
        from deepspeed.runtime.pipe.topology import PipeDataParallelTopology

        args, model, layout = run.args, run.model, run.layout
        if args.save_strategy == "best" or args.load_best_model_at_end:
            raise PipelineRefused(
                "--pp-size keeps no best checkpoint yet: drop --save_strategy best / --load_best_model_at_end"
            )
        self.options, self.args, self.layout, self.resume = run.options, args, layout, run.resume
        self.tokenizer, self.datasets = run.tokenizer, run.datasets
        self.config = model.config
        self.layers: list[PipeLayer] = pipeline_layers(model)
        blocks = sum(layer.is_block for layer in self.layers)
        if blocks < layout.pp:
            raise PipelineRefused(
                f"--pp-size {layout.pp}: the model has {blocks} blocks, fewer than the stages; pick a --pp-size of "
                f"at most {blocks}"
            )
        self.max_steps = plan_steps(args, len(self.datasets["train"]), layout)
        topology = PipeDataParallelTopology(num_pp=layout.pp, num_dp=layout.dp)
        self.pipe = PipelineModule(
            layers=deepspeed_layers(self.layers),
            loss_fn=loss_function(model),
            topology=topology,
            partition_method="type:PipelineBlock",
            # --gradient_checkpointing: each block's forward is recomputed in the backward pass (not the embedding:
            # the reentrant checkpoint of a layer whose input needs no grad would cut its weights off)
            activation_checkpoint_interval=1 if args.gradient_checkpointing else 0,
            checkpointable_layers=["PipelineBlock"],
        )
        config = resolved_ds_config(args, model, layout, self.max_steps)
        parameters = [p for p in self.pipe.parameters() if p.requires_grad]
        optimizer, schedule = optimizer_and_schedule(args, config, parameters, self.max_steps)
        self.engine, _, _, _ = deepspeed.initialize(
            model=self.pipe, model_parameters=parameters, optimizer=optimizer, lr_scheduler=schedule, config=config
        )
        grid = self.pipe._grid
        self.stage, self.dp_rank = grid.get_stage_id(), grid.get_data_parallel_rank()
        self.rank = dist.get_rank()
        self.start = 0
        if self.resume is not None:
            _, client_state = self.engine.load_checkpoint(str(self.resume))
            self.start = int(client_state["zerokit_step"])
        self.metrics: dict[str, float] = {}  # the train metrics, once saved
        # The Trainer's own dispatch and flow: DefaultFlowCallback says when a step logs, evaluates, saves, ends.
        flow = [DefaultFlowCallback(), *run.callbacks]
        self.callbacks = CallbackHandler(flow, self.engine, self.tokenizer, optimizer=None, lr_scheduler=None)
        self.callbacks.on_init_end(args, None, None)

    def local_hf_state(self) -> dict[str, torch.Tensor]:
        """This stage's weights under their Hugging Face names."""
        state: dict[str, torch.Tensor] = {}
        for layer in self.layers[self.pipe._local_start : self.pipe._local_stop]:
            state.update({k: v.detach().cpu().contiguous() for k, v in layer.hf_state().items()})
        return state

    def write_hf_model(self, folder: Path) -> None:
        """The whole model as one HF folder in folder: each stage's first replica writes its weights, rank 0
        merges them (every rank calls this)."""
        from safetensors.torch import load_file, save_file
        from transformers import AutoModelForCausalLM

        stages = folder / STAGES_FOLDER
        if self.dp_rank == 0:
            stages.mkdir(parents=True, exist_ok=True)
            save_file(self.local_hf_state(), str(stages / f"stage-{self.stage}.safetensors"))
        dist.barrier()
        if self.rank == 0:
            merged: dict[str, torch.Tensor] = {}
            for part in sorted(stages.glob("stage-*.safetensors")):
                merged.update(load_file(str(part)))
            with torch.device("meta"):
                model = AutoModelForCausalLM.from_config(self.config)
            missing, unexpected = model.load_state_dict(merged, strict=False, assign=True)
            tied = set(getattr(model, "_tied_weights_keys", None) or {}) if self.config.tie_word_embeddings else set()
            if set(missing) - tied or unexpected:
                raise RuntimeError(
                    f"pipeline stages did not give the whole model: missing {missing}, extra {unexpected}"
                )
            model.tie_weights()
            model.save_pretrained(folder)
            self.tokenizer.save_pretrained(folder)
            shutil.rmtree(stages)
        dist.barrier()

    def save_checkpoint(self, state, control) -> None:
        """checkpoint-N: DeepSpeed's files and the HF model, written into tmp-checkpoint-N, then published."""
        from zerokit.train.engines.hf_trainer import naming_a_full_disk

        run_dir = self.options.output_dir
        name = f"{PREFIX}-{state.global_step}"
        staging = run_dir / f"{STAGING_PREFIX}{name}"
        if self.rank == 0 and staging.exists():  # left by a run killed while saving
            shutil.rmtree(staging)
        dist.barrier()
        step = state.global_step
        with naming_a_full_disk(run_dir, name):
            self.engine.save_checkpoint(str(staging), tag=f"global_step{step}", client_state={"zerokit_step": step})
            self.write_hf_model(staging)
        if self.rank == 0:
            state.save_to_json(str(staging / "trainer_state.json"))
            write_json(staging / PIPELINE_NAME, self.layout.as_record())
            publish(staging, run_dir / name)
            rotate(run_dir, self.args.save_total_limit)
        dist.barrier()
        self.callbacks.on_save(self.args, state, control)

    def validation(self) -> dict[str, float] | None:
        """The validation loss over this layout's whole micro-batches (None when there is not one)."""
        blocks = self.datasets.get("validation")
        micro = self.args.per_device_train_batch_size  # the stages' buffers have the training shape
        count = len(blocks) // self.layout.dp // micro if blocks is not None else 0
        if count == 0:
            return None
        from torch.utils.data import DistributedSampler

        sampler = DistributedSampler(blocks, num_replicas=self.layout.dp, rank=self.dp_rank, shuffle=False)
        order = list(sampler)

        def batches():
            for first in range(0, count * micro, micro):
                rows = blocks[order[first : first + micro]]
                yield torch.tensor(rows["input_ids"]), torch.tensor(rows["labels"])

        loss = float(self.engine.eval_batch(batches(), num_micro_batches=count))
        return {
            "eval_loss": loss,
            "perplexity": perplexity(loss),
            "eval_samples": count * micro * self.layout.dp,
        }

    def train(self) -> dict[str, float]:
        """Steps from the checkpoint's (or 0) to max_steps; the train metrics (empty once preempted)."""
        from tqdm.auto import tqdm
        from transformers import TrainerControl, TrainerState

        from zerokit.train.callbacks.finite_loss import diverged

        args = self.args
        state = TrainerState.load_from_json(str(self.resume / "trainer_state.json")) if self.resume else TrainerState()
        micro, accumulation = args.per_device_train_batch_size, args.gradient_accumulation_steps
        state.max_steps, state.global_step = self.max_steps, self.start
        state.train_batch_size = micro
        state.is_world_process_zero = state.is_local_process_zero = self.rank == 0
        state.compute_steps(args, self.max_steps)  # logging, eval and save steps, as the Trainer counts them
        self.state = state
        control = self.callbacks.on_train_begin(args, state, TrainerControl())
        train_blocks, replicas = self.datasets["train"], self.layout.dp
        per_epoch = len(train_blocks) // replicas // micro
        data = micro_batches(train_blocks, micro, replicas, self.dp_rank, args.seed, self.start * accumulation)
        losses: list[float] = []
        since_log: list[float] = []
        started = time.monotonic()
        bar = tqdm(total=self.max_steps, initial=self.start, disable=self.rank != 0 or args.disable_tqdm)
        for step in range(self.start + 1, self.max_steps + 1):
            control = self.callbacks.on_step_begin(args, state, control)
            loss = float(self.engine.train_batch(data))  # on every rank: the last stage's, averaged over replicas
            heartbeat()  # launch's stall watch: a step ended (as the Trainer's steps report it)
            state.global_step, state.epoch = step, step * accumulation / per_epoch
            if not math.isfinite(loss):
                raise diverged("the loss", step, str(self.options.output_dir))
            losses.append(loss)
            since_log.append(loss)
            bar.update(1)
            control = self.callbacks.on_step_end(args, state, control)  # due logs and saves; a preemption's stop
            if int(state.epoch) > int((step - 1) * accumulation / per_epoch):
                control = self.callbacks.on_epoch_end(args, state, control)
            if control.should_log or (control.should_training_stop and since_log):
                control = self.log(state, control, sum(since_log) / len(since_log))
                since_log = []
            if control.should_evaluate and step < self.max_steps:  # the last evaluation is evaluate()'s
                self.log_evaluation(state, control)
            if control.should_save:
                self.save_checkpoint(state, control)
            if control.should_training_stop:
                break
        bar.close()
        runtime = time.monotonic() - started
        samples = len(losses) * micro * accumulation * replicas
        self.callbacks.on_train_end(args, state, control)
        return {
            "train_loss": sum(losses) / max(1, len(losses)),
            "train_runtime": round(runtime, 4),
            "train_samples_per_second": round(samples / runtime, 3) if runtime else 0.0,
            "train_steps_per_second": round(len(losses) / runtime, 3) if runtime else 0.0,
            "epoch": state.epoch,
        }

    def log(self, state, control, loss: float):
        """The step's logs in the trainer state and on stdout, and to every callback (on_log); its control."""
        entry = {"loss": loss, "learning_rate": float(self.engine.get_lr()[0])}
        norm = self.engine.get_global_grad_norm()
        if norm is not None:
            entry["grad_norm"] = float(norm)
        logs = {**entry, "epoch": state.epoch}
        state.log_history.append({**logs, "step": state.global_step})
        if self.rank == 0:
            show(logs)
        return self.callbacks.on_log(self.args, state, control, logs)

    def log_evaluation(self, state, control) -> dict[str, float] | None:
        """The validation loss, logged as the Trainer logs it (during training, and at the end)."""
        evaluation = self.validation()
        if evaluation is not None:
            state.log_history.append(
                {"eval_loss": evaluation["eval_loss"], "epoch": state.epoch, "step": state.global_step}
            )
            if self.rank == 0:
                show({"eval_loss": evaluation["eval_loss"], "epoch": state.epoch})
            self.callbacks.on_evaluate(self.args, state, control, metrics=evaluation)
        return evaluation

    def save_final(self, metrics: dict[str, float]) -> None:
        """The whole model, the train results and the trainer state in the output folder."""
        from zerokit.train.engines.hf_trainer import naming_a_full_disk

        output = self.options.output_dir
        with naming_a_full_disk(output, "the model"):
            self.write_hf_model(output)
        self.metrics = metrics
        if self.rank == 0:
            write_json(output / "train_results.json", metrics, indent=4)
            write_json(output / "all_results.json", metrics, indent=4)
            self.state.save_to_json(str(output / "trainer_state.json"))

    def evaluate(self) -> dict[str, float] | None:
        """The final validation, logged; its results beside the train results (and in the trainer state)."""
        from transformers import TrainerControl

        evaluation = self.log_evaluation(self.state, TrainerControl())
        if evaluation is not None and self.rank == 0:
            output = self.options.output_dir
            write_json(output / "eval_results.json", evaluation, indent=4)
            write_json(output / "all_results.json", {**self.metrics, **evaluation}, indent=4)
            self.state.save_to_json(str(output / "trainer_state.json"))
            print(f"zerokit: eval loss {evaluation['eval_loss']:.4f}, perplexity {evaluation['perplexity']:.2f}")
        return evaluation


def show(logs: dict) -> None:
    """A log line on stdout, as the Trainer writes it: above the progress bar, not through it."""
    from tqdm.auto import tqdm

    tqdm.write(str(logs))
    sys.stdout.flush()
