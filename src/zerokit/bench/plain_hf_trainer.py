"""A plain HF Trainer + DeepSpeed script, written the way the transformers docs show it: `bench`'s baseline.

    torchrun --nproc-per-node 2 src/zerokit/bench/plain_hf_trainer.py --config_name CONFIG_DIR \
        --tokenizer_name TOKENIZER --train_file train.txt --validation_file validation.txt \
        --block_size 64 --deepspeed configs/zero3.json --output_dir out [TrainingArguments flags]

Without `--deepspeed` it is the Trainer alone (DDP), bench's no-DeepSpeed baseline. Nothing of zerokit
is used except StepClock (`--timings_dir`), the instrument that also times zerokit's `train`, so both are
measured the same way. zerokit.bench.raw_deepspeed_loop takes the same flags and data without the Trainer.
"""

from dataclasses import dataclass, field
from itertools import chain

import deepspeed
import torch
from datasets import load_dataset
from transformers import (
    AutoConfig,
    AutoModelForCausalLM,
    AutoTokenizer,
    HfArgumentParser,
    Trainer,
    TrainingArguments,
    default_data_collator,
)

from zerokit.foundations.process_end import end_process, keep_until_exit


@dataclass
class ScriptArguments:
    tokenizer_name: str
    train_file: str
    validation_file: str
    block_size: int
    config_name: str | None = field(default=None, metadata={"help": "train from scratch with this config"})
    model_name_or_path: str | None = field(default=None, metadata={"help": "fine-tune this model"})
    timings_dir: str | None = None
    attn_implementation: str | None = field(default=None, metadata={"help": "e.g. flash_attention_2 (the docs' way)"})


def load_model(script: ScriptArguments):
    kernel = {"attn_implementation": script.attn_implementation} if script.attn_implementation else {}
    if script.model_name_or_path:
        return AutoModelForCausalLM.from_pretrained(script.model_name_or_path, **kernel)
    return AutoModelForCausalLM.from_config(AutoConfig.from_pretrained(script.config_name), **kernel)


def text_blocks(script: ScriptArguments, tokenizer, args: TrainingArguments):
    """The text files as blocks of block_size tokens (run_clm's group_texts): {"train": ..., "validation": ...}."""
    raw = load_dataset("text", data_files={"train": script.train_file, "validation": script.validation_file})

    def tokenize(batch):
        return tokenizer([line + tokenizer.eos_token for line in batch["text"]])

    def group_texts(examples):
        joined = {k: list(chain(*examples[k])) for k in examples}
        total = len(joined["input_ids"]) // script.block_size * script.block_size
        blocks = {
            k: [t[i : i + script.block_size] for i in range(0, total, script.block_size)] for k, t in joined.items()
        }
        blocks["labels"] = blocks["input_ids"].copy()
        return blocks

    with args.main_process_first(desc="tokenize"):
        tokenized = raw.map(tokenize, batched=True, remove_columns=["text"])
        return tokenized.map(group_texts, batched=True)


def main() -> None:
    script, args = HfArgumentParser((ScriptArguments, TrainingArguments)).parse_args_into_dataclasses()
    if args.deepspeed:
        # The one line the docs leave out: on CPU, accelerate starts torch.distributed but not
        # deepspeed.comm, and DeepSpeed then sees one rank ("train_batch_size is not equal to ...").
        deepspeed.init_distributed()
    tokenizer = AutoTokenizer.from_pretrained(script.tokenizer_name)
    model = load_model(script)
    blocks = text_blocks(script, tokenizer, args)

    callbacks = []
    if script.timings_dir:
        from zerokit.train.callbacks.step_clock import StepClock

        callbacks.append(StepClock(script.timings_dir, tokens_per_sample=script.block_size))
    trainer = Trainer(
        model=model,
        args=args,
        train_dataset=blocks["train"],
        eval_dataset=blocks["validation"],
        processing_class=tokenizer,
        data_collator=default_data_collator,
        callbacks=callbacks,
    )
    keep_until_exit(trainer)  # its DDP model holds the process group: never freed under the GIL (see end_process)
    trainer.train()
    trainer.save_model()
    if torch.distributed.is_initialized():  # as torch's docs end a distributed script (gloo may abort at exit)
        torch.distributed.destroy_process_group()


if __name__ == "__main__":
    main()
    # Ended as zerokit's ranks end (zerokit.foundations.process_end): a gloo thread that wants the GIL while the
    # process group is freed, or during the interpreter's finalization, can abort the rank or hold it forever.
    end_process(0)
