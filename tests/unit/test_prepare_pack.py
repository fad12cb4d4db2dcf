"""`prepare tokenize` on jsonl with a prompt template, and its input errors (real datasets/tokenizers code)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from zerokit.foundations.errors import UserError
from zerokit.prepare.manifest import MANIFEST_NAME, file_hashes, update_manifest
from zerokit.prepare.pack import template_fields, tokenize_to_disk
from zerokit.prepare.stage import check_online
from zerokit.sources.data import PREPARED_NAME, read_prepared, resolve_source
from zerokit.sources.embedded import prepare_embedded

TEMPLATE = "Title: {title}\\nContext: {context}\\nQuestion: {question}\\nAnswer: {answer}"
ROWS = [
    {"title": f"fox {i}", "context": "the red fox runs to the river .", "question": "where?", "answer": "the river"}
    for i in range(40)
]


@pytest.fixture(scope="module")
def tokenizer(tmp_path_factory) -> Path:
    return prepare_embedded(tmp_path_factory.mktemp("embedded"))[1]


def write_jsonl(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return path


def test_jsonl_with_a_template_is_tokenized_into_blocks(tmp_path: Path, tokenizer: Path):
    from datasets import load_from_disk
    from transformers import AutoTokenizer

    data = write_jsonl(tmp_path / "qa.jsonl", ROWS)
    output = tmp_path / "prepared"
    info = tokenize_to_disk(str(data), str(tokenizer), output, block_size=32, template=TEMPLATE, num_proc=2)
    assert read_prepared(output) == info and resolve_source(str(output)).kind == "prepared"
    blocks = load_from_disk(str(output))
    assert set(blocks) == {"train", "validation"} and info["blocks"]["train"] == len(blocks["train"])
    assert all(len(ids) == 32 for ids in blocks["train"]["input_ids"])
    assert blocks["train"]["labels"] == blocks["train"]["input_ids"]
    text = AutoTokenizer.from_pretrained(tokenizer).decode([i for ids in blocks["train"]["input_ids"][:4] for i in ids])
    assert "\nContext: the red fox runs to the river .\nQuestion: where?\nAnswer: the river" in text


def test_a_template_naming_a_missing_column_is_one_line(tmp_path: Path, tokenizer: Path):
    data = write_jsonl(tmp_path / "qa.jsonl", ROWS)
    with pytest.raises(UserError, match=r"--template names topic, not columns of the dataset \(title, context"):
        tokenize_to_disk(str(data), str(tokenizer), tmp_path / "out", template="{topic}: {answer}")
    assert not (tmp_path / "out").exists()


def test_an_existing_output_is_kept_unless_overwrite(tmp_path: Path, tokenizer: Path):
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / PREPARED_NAME).write_text("{}")  # written by an earlier `prepare tokenize`
    with pytest.raises(UserError, match="--overwrite"):
        tokenize_to_disk("missing.txt", str(tokenizer), tmp_path / "out")


def test_template_fields():
    assert template_fields(TEMPLATE) == ["title", "context", "question", "answer"]
    with pytest.raises(UserError, match="placeholders"):
        template_fields("Title: {title")


def test_manifest_merges_entries_and_hashes_files(tmp_path: Path):
    (tmp_path / "a.txt").write_text("abc")
    files = file_hashes([tmp_path / "a.txt"], tmp_path)
    assert files == {"a.txt": "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"}
    update_manifest(tmp_path, {"kind": "model", "name": "m", "revision": "1", "files": files})
    update_manifest(tmp_path, {"kind": "dataset", "name": "m", "revision": "2", "files": {}})
    update_manifest(tmp_path, {"kind": "model", "name": "m", "revision": "3", "files": {}})
    entries = json.loads((tmp_path / MANIFEST_NAME).read_text())["entries"]
    assert sorted((e["kind"], e["revision"]) for e in entries) == [("dataset", "2"), ("model", "3")]


def test_staging_refuses_to_run_offline():
    with pytest.raises(UserError, match="HF_HUB_OFFLINE=1: run it where there is network"):
        check_online({"HF_HUB_OFFLINE": "1"})
    check_online({"HF_HUB_OFFLINE": "0"})


def test_streaming_needs_a_dataset():
    from zerokit.train.cli import parse

    with pytest.raises(UserError, match="--streaming needs --dataset"):
        parse(["--streaming"])
