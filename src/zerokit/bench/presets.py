"""`bench --preset NAME`: a whole benchmark job in one word, at a size that says something about a GPU.

A preset is bench's flags (which the user's own flags override, given after it) plus the inputs it makes in the
report folder: a GPT-2 built from a config (random weights: throughput does not depend on them) with its
vocabulary padded to a multiple of 64 (nanoGPT's 50304 for the GPT-2 sizes) and no dropout (pretraining
from scratch, as llm.c and nanoGPT run it; GPT2Config's default is 0.1 in three places), the embedded tokenizer, and the
embedded corpus repeated until every step at bench's --batch-size draws full batches from the first epoch (a run
of `--micro-batch auto` goes through it several times; on a GPU every epoch's short last batch is dropped).

- gpt2-124m: GPT-2 small's shape (12 x 768, 1024 positions), blocks of 1024 tokens, 16 per step, 60 steps.
- gpt2-350m: GPT-2 medium's (24 x 1024), 8 per step.
- tiny: the same job at 2 x 64 and blocks of 64 tokens: every path of the GPU job, in seconds on CPU ranks.

Each runs on one rank: --config zero2, and as rows zero1 and zero3 (ZeRO-3 on one rank partitions nothing: its
row measures its hooks' cost only), the speed table (train's speed switches, each alone and all together:
zerokit.bench.plan.speed_switches), the overhead rounds (zerokit, the plain HF Trainer with the same config and
without DeepSpeed, the raw DeepSpeed loop) three times.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path

from zerokit.foundations.errors import UserError


@dataclass(frozen=True)
class Preset:
    layers: int
    hidden: int
    heads: int
    positions: int  # also the block size
    vocab: int | None  # None: the tokenizer's, padded to a multiple of 64
    batch_size: int
    steps: int
    warmup_steps: int


PRESETS = {
    "gpt2-124m": Preset(12, 768, 12, 1024, 50304, batch_size=16, steps=60, warmup_steps=10),
    "gpt2-350m": Preset(24, 1024, 16, 1024, 50304, batch_size=8, steps=60, warmup_steps=10),
    "tiny": Preset(2, 64, 2, 64, None, batch_size=4, steps=12, warmup_steps=2),
}
REPEATS = 3
# The share of the text zerokit's train holds out for evaluation (its --validation-percent default, and more).
HELD_OUT = 0.1
# train tokenizes the corpus line by line, without the newlines this count includes: a corpus of exactly the steps'
# blocks gave the H200's 60-step run a short last batch (and a compiled model a 38.5 s recompile). A quarter more.
CORPUS_MARGIN = 1.25


def model_folder(output: Path) -> Path:
    return output / "preset" / "model"


def corpus_file(output: Path) -> Path:
    return output / "preset" / "train.txt"


def preset_flags(name: str, output: Path) -> list[str]:
    """bench's flags for the preset; the user's, parsed after them, win (a --skip adds to the preset's)."""
    p = PRESETS[name]
    return [
        "--ranks", "1", "--config", "zero2", "--configs", "zero1,zero3",
        "--model", str(model_folder(output)), "--dataset", str(corpus_file(output)),
        "--block-size", str(p.positions), "--batch-size", str(p.batch_size),
        "--steps", str(p.steps), "--warmup-steps", str(p.warmup_steps), "--eval-steps", str(p.steps),
        "--repeats", str(REPEATS), "--skip", "startup", "--skip", "data", "--skip", "preemption",
    ]  # fmt: skip


def check_block_size(name: str, block_size: int) -> None:
    if block_size > PRESETS[name].positions:
        raise UserError(f"--block-size {block_size} is past the preset {name}'s {PRESETS[name].positions} positions")


def make_inputs(name: str, output: Path, samples: int, block_size: int) -> dict:
    """The model folder and the corpus of the preset in `output`; `samples` blocks of `block_size` tokens are
    drawn by the longest run. Returns what was made (parameters, corpus tokens) for the report."""
    from transformers import AutoTokenizer, GPT2Config, GPT2LMHeadModel

    from zerokit.sources.embedded import prepare_embedded

    p = PRESETS[name]
    check_block_size(name, block_size)
    files, tokenizer_dir = prepare_embedded(output / "cache" / "embedded")
    tokenizer = AutoTokenizer.from_pretrained(tokenizer_dir)
    vocab = p.vocab or 64 * math.ceil(len(tokenizer) / 64)
    config = GPT2Config(
        vocab_size=vocab, n_layer=p.layers, n_embd=p.hidden, n_head=p.heads, n_positions=p.positions,
        bos_token_id=tokenizer.eos_token_id, eos_token_id=tokenizer.eos_token_id,
        resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0,  # pretraining from scratch, as llm.c and nanoGPT
    )  # fmt: skip
    model = GPT2LMHeadModel(config)
    model_folder(output).mkdir(parents=True, exist_ok=True)
    model.save_pretrained(model_folder(output))
    tokenizer.save_pretrained(model_folder(output))
    text = Path(files["train"]).read_text()
    tokens = len(tokenizer(text)["input_ids"])
    copies = math.ceil(CORPUS_MARGIN * samples * block_size / ((1 - HELD_OUT) * tokens)) + 1
    corpus_file(output).write_text(text * copies)
    made = {"preset": name, "parameters": model.num_parameters(), "vocab": vocab, "corpus_tokens": tokens * copies}
    (output / "preset" / "made.json").write_text(json.dumps(made, indent=2) + "\n")
    return made
