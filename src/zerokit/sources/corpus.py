"""The embedded default corpus: generated, deterministic, with structure a tiny model can learn.

Three kinds of line, each with rules a model picks up in a few hundred steps, so the
loss falls clearly and a generated sample visibly follows them:
- small sums written out: "seven plus two is nine ."
- agreement: "the red fox runs to the river ." / "the red foxes run to the river ."
- counting runs: "count : three four five six ."
"""

from __future__ import annotations

import random
from pathlib import Path

NUMBERS = [
    "zero",
    "one",
    "two",
    "three",
    "four",
    "five",
    "six",
    "seven",
    "eight",
    "nine",
    "ten",
    "eleven",
    "twelve",
    "thirteen",
    "fourteen",
    "fifteen",
    "sixteen",
    "seventeen",
    "eighteen",
]
ADJECTIVES = ["red", "quick", "small", "old", "brave", "quiet", "green", "clever"]
# (singular, plural) nouns and (singular, plural) verbs.
NOUNS = [("fox", "foxes"), ("bird", "birds"), ("cat", "cats"), ("child", "children"), ("horse", "horses")]
VERBS = [("runs", "run"), ("walks", "walk"), ("flies", "fly"), ("swims", "swim"), ("looks", "look")]
PLACES = ["the river", "the hill", "the town", "the forest", "the sea", "the field"]

TRAIN_LINES = 6000
EVAL_LINES = 400


def _sum_line(rng: random.Random) -> str:
    a, b = rng.randint(0, 9), rng.randint(0, 9)
    return f"{NUMBERS[a]} plus {NUMBERS[b]} is {NUMBERS[a + b]} ."


def _agreement_line(rng: random.Random) -> str:
    plural = rng.random() < 0.5
    noun = rng.choice(NOUNS)[plural]
    verb = rng.choice(VERBS)[plural]
    return f"the {rng.choice(ADJECTIVES)} {noun} {verb} to {rng.choice(PLACES)} ."


def _count_line(rng: random.Random) -> str:
    start = rng.randint(0, len(NUMBERS) - 5)
    length = rng.randint(3, 5)
    return "count : " + " ".join(NUMBERS[start : start + length]) + " ."


def generate_lines(count: int, seed: int) -> list[str]:
    rng = random.Random(seed)
    makers = (_sum_line, _agreement_line, _count_line)
    return [rng.choice(makers)(rng) for _ in range(count)]


def write_corpus(folder: Path) -> dict[str, Path]:
    """Write train.txt and validation.txt (different seeds, so eval lines are unseen) into folder."""
    folder.mkdir(parents=True, exist_ok=True)
    files = {"train": folder / "train.txt", "validation": folder / "validation.txt"}
    for (split, path), seed in zip(files.items(), (1234, 5678), strict=True):
        lines = generate_lines(TRAIN_LINES if split == "train" else EVAL_LINES, seed)
        path.write_text("\n".join(lines) + "\n")
    return files


SAMPLE_PROMPTS = ["three plus four is", "the quick foxes", "count : five", "the old horse"]
