"""An empty prompt has no token to continue from (each rank ended in an IndexError): its row is written with the
error, where the prompt came from and the fix, and the others are answered."""

from __future__ import annotations

import json
from pathlib import Path

from zerokit.generate.options import parse
from zerokit.generate.prompts import read_rows


def test_an_empty_prompt_is_a_row_with_an_error_and_the_others_are_kept(tmp_path: Path):
    rows = tmp_path / "rows.jsonl"
    rows.write_text(json.dumps({"prompt": ""}) + "\n" + json.dumps({"prompt": "the cat"}) + "\n")
    read = read_rows(parse(["model", "--prompt", "", "--prompt", " the", "--jsonl", str(rows)]))
    assert [(row.prompt, row.error) for row in read] == [
        ("", "--prompt: the prompt is empty: give it text"),
        (" the", None),
        ("", f"{rows}:1: the prompt is empty: give it text"),
        ("the cat", None),
    ]
