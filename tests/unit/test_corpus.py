"""The embedded corpus is deterministic and follows its rules (so a trained model can learn them)."""

from __future__ import annotations

from zerokit.sources.corpus import NUMBERS, generate_lines, write_corpus


def test_same_seed_same_corpus_other_seed_other_corpus():
    assert generate_lines(200, seed=1) == generate_lines(200, seed=1)
    assert generate_lines(200, seed=1) != generate_lines(200, seed=2)


def test_sums_are_correct():
    sums = [line.split() for line in generate_lines(500, seed=3) if " plus " in line]
    assert sums
    for a, _plus, b, _is, total, _dot in sums:
        assert NUMBERS.index(a) + NUMBERS.index(b) == NUMBERS.index(total)


def test_written_splits_differ(tmp_path):
    files = write_corpus(tmp_path)
    train, validation = (files[k].read_text().splitlines() for k in ("train", "validation"))
    assert len(train) == 6000 and len(validation) == 400
    assert train[:50] != validation[:50]
