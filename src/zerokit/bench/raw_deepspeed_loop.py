"""A raw DeepSpeed loop, no Trainer: `deepspeed.initialize`, then forward, `engine.backward`, `engine.step`.

    torchrun --nproc-per-node N src/zerokit/bench/raw_deepspeed_loop.py <the plain HF script's flags>

bench's floor: the plain HF script's model, blocks, batch sizes, seed, DeepSpeed config and StepClock, with
nothing between the loop and DeepSpeed. The config's "auto" values are filled by transformers' own
HfTrainerDeepSpeedConfig, as the Trainer fills them; without an optimizer or scheduler section the loop
makes the Trainer's (torch AdamW, --lr_scheduler_type), as the Trainer would. Each rank reads its share of
every epoch (DistributedSampler, full batches only); evaluation every --eval_steps is the mean loss over the
validation blocks. StepClock is driven with the step count and token count the Trainer would give it.
"""

from types import SimpleNamespace

import deepspeed
import torch
from torch.utils.data import DataLoader, DistributedSampler
from transformers import AutoTokenizer, HfArgumentParser, TrainingArguments, default_data_collator, get_scheduler

from zerokit.bench.plain_hf_trainer import ScriptArguments, load_model, text_blocks
from zerokit.foundations.process_end import end_process, keep_until_exit
from zerokit.train.callbacks.step_clock import StepClock


def batches(dataset, micro: int, world: int, rank: int, seed: int):
    """Full micro-batches of this rank's share, epoch after epoch."""
    sampler = DistributedSampler(dataset, num_replicas=world, rank=rank, shuffle=True, seed=seed, drop_last=True)
    loader = DataLoader(dataset, batch_size=micro, sampler=sampler, collate_fn=default_data_collator, drop_last=True)
    if len(loader) == 0:
        raise SystemExit(f"raw_deepspeed_loop: {len(dataset)} blocks make no full batch of {micro} on {world} ranks")
    epoch = 0
    while True:
        sampler.set_epoch(epoch)
        yield from loader
        epoch += 1


def evaluate(engine, dataset, micro: int, world: int, rank: int) -> float:
    """Mean loss over the validation blocks, every rank's share summed."""
    sampler = DistributedSampler(dataset, num_replicas=world, rank=rank, shuffle=False)
    loader = DataLoader(dataset, batch_size=micro, sampler=sampler, collate_fn=default_data_collator)
    engine.eval()
    total = torch.zeros(2, device=engine.device)
    with torch.no_grad():
        for batch in loader:
            loss = engine(**{k: v.to(engine.device) for k, v in batch.items()}).loss
            rows = len(batch["input_ids"])
            total += torch.stack([loss.float() * rows, torch.tensor(float(rows), device=engine.device)])
    engine.train()
    torch.distributed.all_reduce(total)
    return (total[0] / total[1]).item()


def main() -> None:
    script, args = HfArgumentParser((ScriptArguments, TrainingArguments)).parse_args_into_dataclasses()
    if not args.deepspeed:
        raise SystemExit("raw_deepspeed_loop: give --deepspeed CONFIG (it times DeepSpeed without the Trainer)")
    deepspeed.init_distributed()
    torch.manual_seed(args.seed)
    tokenizer = AutoTokenizer.from_pretrained(script.tokenizer_name)
    model = load_model(script)
    blocks = text_blocks(script, tokenizer, args)
    steps, micro, accumulation = args.max_steps, args.per_device_train_batch_size, args.gradient_accumulation_steps
    ds_config = args.hf_deepspeed_config
    ds_config.trainer_config_finalize(args, model, steps)
    config = ds_config.config

    def optimizer(params):
        return torch.optim.AdamW(
            params, lr=args.learning_rate, betas=(args.adam_beta1, args.adam_beta2), eps=args.adam_epsilon,
            weight_decay=args.weight_decay,
        )  # fmt: skip

    def scheduler(opt):
        return get_scheduler(args.lr_scheduler_type, opt, args.get_warmup_steps(steps), steps)

    engine, *_ = deepspeed.initialize(
        model=model,
        model_parameters=[p for p in model.parameters() if p.requires_grad],
        optimizer=None if "optimizer" in config else optimizer,
        lr_scheduler=None if "scheduler" in config else scheduler,
        config=config,
    )
    keep_until_exit(engine)  # it holds the process group: never freed under the GIL (zerokit.foundations.process_end)
    if args.torch_compile:  # as accelerate compiles a DeepSpeed model for the Trainer: the engine's own compile()
        mode = {"mode": args.torch_compile_mode} if args.torch_compile_mode else {}
        engine.compile(backend=args.torch_compile_backend or "inductor", compile_kwargs=mode)
    world, rank = torch.distributed.get_world_size(), torch.distributed.get_rank()
    # What StepClock reads from the Trainer's arguments and state.
    run = SimpleNamespace(world_size=world, process_index=rank, per_device_train_batch_size=micro)
    run.gradient_accumulation_steps = accumulation
    state = SimpleNamespace(global_step=0, num_input_tokens_seen=0)
    clock = StepClock(script.timings_dir, tokens_per_sample=script.block_size) if script.timings_dir else None
    if clock:
        clock.on_train_begin(run, state, None, model=engine.module)
    stream = batches(blocks["train"], micro, world, rank, args.seed)
    while state.global_step < steps:
        tokens = 0
        for _ in range(accumulation):
            batch = {k: v.to(engine.device) for k, v in next(stream).items()}
            loss = engine(**batch).loss
            engine.backward(loss)
            engine.step()
            tokens += batch["input_ids"].numel()
        state.global_step += 1
        state.num_input_tokens_seen += tokens * world  # every rank's batches are full and of one size
        if clock:
            clock.on_step_end(run, state, None)
        if args.logging_steps and state.global_step % args.logging_steps == 0 and rank == 0:
            print({"loss": round(loss.item(), 4), "step": state.global_step}, flush=True)
        if args.eval_strategy == "steps" and args.eval_steps and state.global_step % args.eval_steps == 0:
            eval_loss = evaluate(engine, blocks["validation"], args.per_device_eval_batch_size, world, rank)
            if rank == 0:
                print({"eval_loss": round(eval_loss, 4), "step": state.global_step}, flush=True)
            if clock:
                clock.on_evaluate(run, state, None, metrics={"eval_loss": eval_loss})
    if clock:
        clock.on_train_end(run, state, None)
    engine.destroy()
    torch.distributed.destroy_process_group()


if __name__ == "__main__":
    main()
    # Ended as zerokit's ranks end (zerokit.foundations.process_end): a gloo thread that wants the GIL while the
    # process group is freed, or during the interpreter's finalization, can abort the rank or hold it forever.
    end_process(0)
