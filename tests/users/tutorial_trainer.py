"""A tutorial-style script (as the ULHPC DeepSpeed tutorial's): the DeepSpeed config is a dict in the
script, with a train_batch_size worked out for 2 ranks, and the script is started with DeepSpeed's
launcher (`deepspeed --hostfile hostfile script.py`), which passes --local_rank.

A plain user script: it imports nothing of zerokit.
"""

import argparse

from datasets import load_dataset
from transformers import (
    AutoConfig,
    AutoModelForCausalLM,
    AutoTokenizer,
    DataCollatorForLanguageModeling,
    Trainer,
    TrainingArguments,
)

# 4 per GPU x 1 accumulation step x 2 GPUs
ds_config = {
    "train_batch_size": 8,
    "train_micro_batch_size_per_gpu": 4,
    "gradient_accumulation_steps": 1,
    "optimizer": {"type": "AdamW", "params": {"lr": 5e-3}},
    "zero_optimization": {"stage": 3, "stage3_gather_16bit_weights_on_model_save": True},
    "steps_per_print": 1000000,
}

parser = argparse.ArgumentParser()
parser.add_argument("--local_rank", type=int, default=-1)  # set by the deepspeed launcher
parser.add_argument("--model_config", required=True)
parser.add_argument("--tokenizer", required=True)
parser.add_argument("--train_file", required=True)
parser.add_argument("--output_dir", default="./results")
parser.add_argument("--max_steps", type=int, default=20)
args = parser.parse_args()

tokenizer = AutoTokenizer.from_pretrained(args.tokenizer)
dataset = load_dataset("text", data_files={"train": args.train_file})["train"]
dataset = dataset.map(lambda batch: tokenizer(batch["text"], truncation=True, max_length=64), batched=True)
dataset = dataset.remove_columns(["text"])

training_args = TrainingArguments(
    output_dir=args.output_dir,
    per_device_train_batch_size=4,
    gradient_accumulation_steps=1,
    learning_rate=5e-3,
    max_steps=args.max_steps,
    logging_steps=5,
    save_strategy="no",
    report_to="none",
    deepspeed=ds_config,
)
print(f"tutorial: rank {training_args.process_index} of world size {training_args.world_size}", flush=True)
model = AutoModelForCausalLM.from_config(AutoConfig.from_pretrained(args.model_config))

trainer = Trainer(
    model=model,
    args=training_args,
    train_dataset=dataset,
    data_collator=DataCollatorForLanguageModeling(tokenizer, mlm=False),
)
trainer.train()
trainer.save_model()
