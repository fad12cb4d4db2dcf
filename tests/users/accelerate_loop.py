"""A user's own accelerate training loop with DeepSpeed, as accelerate's examples write it (nothing of zerokit).

    python accelerate_loop.py --zero-stage 2     # DeepSpeed from a DeepSpeedPlugin in the code
    python accelerate_loop.py                    # DeepSpeed from the environment, as `accelerate launch
                                                 # --use_deepspeed --deepspeed_config_file ds.json` sets it

A tiny GPT-2 from a config learns one repeated sequence, so the loss falls within a few steps.
"""

import argparse

import torch
from accelerate import Accelerator
from accelerate.utils import DeepSpeedPlugin, DistributedType
from transformers import GPT2Config, GPT2LMHeadModel

parser = argparse.ArgumentParser()
parser.add_argument(
    "--zero-stage", type=int, help="a DeepSpeedPlugin with this ZeRO stage (default: from the environment)"
)
parser.add_argument("--steps", type=int, default=12)
args = parser.parse_args()

plugin = DeepSpeedPlugin(zero_stage=args.zero_stage, gradient_accumulation_steps=1) if args.zero_stage else None
accelerator = Accelerator(deepspeed_plugin=plugin)
print(f"accelerate_loop: rank {accelerator.process_index} of world size {accelerator.num_processes}", flush=True)
print(f"accelerate_loop: deepspeed {accelerator.distributed_type == DistributedType.DEEPSPEED}", flush=True)

torch.manual_seed(0)
model = GPT2LMHeadModel(GPT2Config(n_layer=2, n_embd=64, n_head=2, vocab_size=64, n_positions=32))
optimizer = torch.optim.AdamW(model.parameters(), lr=5e-3)
sequence = torch.arange(32) % 17
loader = torch.utils.data.DataLoader([sequence] * (4 * args.steps * accelerator.num_processes), batch_size=4)
model, optimizer, loader = accelerator.prepare(model, optimizer, loader)
for step, batch in enumerate(loader):
    loss = model(input_ids=batch, labels=batch).loss
    accelerator.backward(loss)
    optimizer.step()
    optimizer.zero_grad()
    if step % 3 == 0 and accelerator.is_main_process:
        print({"loss": round(loss.item(), 4), "step": step}, flush=True)
accelerator.wait_for_everyone()
