"""The embedded default: a tiny GPT-2, the generated corpus and a tokenizer trained on it.

Everything is made locally and deterministically, so `train` with no `--model` and no
`--dataset` works on an offline node and in CI.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import socket
from pathlib import Path

from zerokit.sources.corpus import write_corpus

VOCAB_SIZE = 512
BLOCK_SIZE = 64
# Small enough for a 2-core CPU, big enough to learn the corpus's rules in a few hundred steps.
GPT2_SIZE = {"n_layer": 2, "n_head": 4, "n_embd": 128, "n_positions": BLOCK_SIZE}
EOS = "<|endoftext|>"


def model_config():
    """The embedded default's GPT-2 config (vocabulary and special tokens come from the tokenizer)."""
    from transformers import GPT2Config

    return GPT2Config(**GPT2_SIZE)


def train_tokenizer(files: list[Path], folder: Path):
    """Train a byte-level BPE tokenizer on files and save it (transformers format) into folder."""
    from tokenizers import ByteLevelBPETokenizer
    from transformers import PreTrainedTokenizerFast

    bpe = ByteLevelBPETokenizer()
    bpe.train(
        [str(f) for f in files], vocab_size=VOCAB_SIZE, min_frequency=2, special_tokens=[EOS], show_progress=False
    )
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=bpe, bos_token=EOS, eos_token=EOS, pad_token=EOS, unk_token=EOS
    )
    tokenizer.model_max_length = BLOCK_SIZE
    tokenizer.save_pretrained(folder)
    return tokenizer


def prepare_embedded(folder: Path) -> tuple[dict[str, Path], Path]:
    """Write the corpus and the tokenizer into folder (once); return (split files, tokenizer folder).

    Called on every rank; the files are identical on each, and written atomically, so ranks
    racing on a shared filesystem all see a complete copy.
    """
    corpus_dir, tokenizer_dir = folder / "corpus", folder / "tokenizer"
    files = {"train": corpus_dir / "train.txt", "validation": corpus_dir / "validation.txt"}
    if not (tokenizer_dir / "tokenizer.json").is_file():
        staging = folder / f".staging-{socket.gethostname()}-{os.getpid()}"
        staged = write_corpus(staging / "corpus")
        train_tokenizer([staged["train"]], staging / "tokenizer")
        for name in ("corpus", "tokenizer"):
            with contextlib.suppress(OSError):  # another rank got there first: its copy is identical
                (staging / name).rename(folder / name)
        shutil.rmtree(staging, ignore_errors=True)
    return files, tokenizer_dir
