"""`generate`: prompts from a jsonl + template, batches, seeded sampling, jsonl out, outputs kept."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.conftest import run_zerokit
from zerokit.sources.embedded import GPT2_SIZE, prepare_embedded

ROWS = [
    {"question": "three plus four", "id": 1},
    {"question": "count : five", "id": 2},
    {"question": "the old", "id": 3},
]


@pytest.fixture(scope="module")
def model(tmp_path_factory) -> Path:
    """A small random GPT-2 with the embedded tokenizer, as save_pretrained writes it."""
    import torch
    from transformers import AutoTokenizer, GPT2Config, GPT2LMHeadModel

    folder = tmp_path_factory.mktemp("generate")
    tokenizer = AutoTokenizer.from_pretrained(prepare_embedded(folder / "embedded")[1])
    torch.manual_seed(0)
    ids = {"bos_token_id": tokenizer.eos_token_id, "eos_token_id": tokenizer.eos_token_id}
    GPT2LMHeadModel(GPT2Config(vocab_size=len(tokenizer), **ids, **GPT2_SIZE)).save_pretrained(folder / "model")
    tokenizer.save_pretrained(folder / "model")
    return folder / "model"


def test_jsonl_template_batches_and_seeded_sampling(tmp_path: Path, zk_env, model: Path):
    prompts = tmp_path / "rows.jsonl"
    prompts.write_text("".join(json.dumps(row) + "\n" for row in ROWS))
    argv = ["generate", str(model), "--jsonl", str(prompts), "--template", "Q: {question}\\nA:", "--batch-size", "2"]
    argv += ["--temperature", "0.9", "--top-p", "0.95", "--seed", "3", "--max-new-tokens", "5"]
    outputs = []
    for name in ("a.jsonl", "b.jsonl"):
        result = run_zerokit([*argv, "--output", str(tmp_path / name)], zk_env)
        assert result.returncode == 0, result.stderr[-3000:]
        outputs.append([json.loads(line) for line in (tmp_path / name).read_text().splitlines()])
    assert outputs[0] == outputs[1]  # same seed, same samples
    assert [row["prompt"] for row in outputs[0]] == [f"Q: {row['question']}\nA:" for row in ROWS]
    for row in outputs[0]:
        assert row["text"].startswith(row["prompt"]) and row["text"] == row["prompt"] + row["completion"]

    again = run_zerokit([*argv, "--output", str(tmp_path / "a.jsonl")], zk_env)
    assert again.returncode == 2 and "--overwrite" in again.stderr


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--template", "{question}"], "--template fills prompts from --jsonl rows"),
        (["--jsonl", "{rows}", "--template", "{topic}"], "no field 'topic' for the template; the row has question, id"),
        (["--base", "gpt2"], "--base is for LoRA adapter folders"),
        ([], "no prompts"),
        (["--prompt", "x", "--temperature", "0.7", "--top-p", "2"], "--top-p (ZEROKIT_TOP_P)='2' is not a share of"),
        (["--prompt", "x", "--temperature", "-1"], "--temperature (ZEROKIT_TEMPERATURE)='-1' is not a temperature"),
    ],
)
def test_input_errors_are_one_line(tmp_path: Path, zk_env, model: Path, extra: list[str], message: str):
    rows = tmp_path / "rows.jsonl"
    rows.write_text(json.dumps(ROWS[0]) + "\n")
    argv = ["generate", str(model), *[arg.replace("{rows}", str(rows)) for arg in extra]]
    if "--base" in extra:
        argv += ["--prompt", "x"]
    result = run_zerokit(argv, zk_env)
    assert result.returncode == 2
    assert len(result.stderr.strip().splitlines()) == 1 and message in result.stderr, result.stderr


def test_rows_past_the_context_are_fitted_with_one_warning_or_refused(tmp_path: Path, zk_env, model: Path):
    """A prompt longer than the model's 64 positions among good rows: cut from the left with one warning, every
    row written (before, the run died in torch.embedding at that row's batch); `--truncate error` (here from
    ZEROKIT_TRUNCATE) refuses the run in one line before the model loads, writing nothing."""
    from transformers import AutoTokenizer

    long_row = {"question": "count : one two three four five six seven eight nine ten " * 8, "id": 4}
    rows = [*ROWS, long_row]
    prompts = tmp_path / "rows.jsonl"
    prompts.write_text("".join(json.dumps(row) + "\n" for row in rows))
    argv = ["generate", str(model), "--jsonl", str(prompts), "--template", "Q: {question}\\nA:"]
    argv += ["--batch-size", "2", "--max-new-tokens", "8"]
    result = run_zerokit([*argv, "--output", str(tmp_path / "out.jsonl")], zk_env)
    assert result.returncode == 0, result.stderr[-3000:]
    warnings = [line for line in result.stderr.splitlines() if "warning" in line]
    assert warnings == [
        "generate: warning: 1 of 4 rows (row 3) pass the model's context of 64 tokens with their new tokens: "
        "1 with the prompt cut from the left, 0 with the new tokens capped; --truncate error refuses such rows instead"
    ], result.stderr
    written = [json.loads(line) for line in (tmp_path / "out.jsonl").read_text().splitlines()]
    assert [row["row"] for row in written] == [0, 1, 2, 3]
    assert written[3]["prompt"] == f"Q: {long_row['question']}\nA:" and written[3]["completion"]

    length = len(AutoTokenizer.from_pretrained(model)(written[3]["prompt"])["input_ids"])
    refused = run_zerokit([*argv, "--output", str(tmp_path / "refused.jsonl")], {**zk_env, "ZEROKIT_TRUNCATE": "error"})
    assert refused.returncode == 2
    assert refused.stderr.splitlines() == [
        f"error: --truncate error: row 3's prompt of {length} tokens leaves no room for new tokens in the model's "
        "context of 64 tokens: pass --truncate left (keeps a prompt's last tokens), or prompts shorter than 64 tokens"
    ]
    assert not (tmp_path / "refused.jsonl").exists() and not (tmp_path / ".refused.jsonl.partial").exists()


def test_a_prompts_line_that_is_not_utf8_is_named_and_the_others_answered(tmp_path: Path, zk_env, model: Path):
    """A line with the bytes \\xff\\xfe among good ones: before, a UnicodeDecodeError traceback and no row answered.
    Its row now holds the error (its line and byte, and the fix) in place of an answer, said once on stderr, and
    the others are answered; once the file is converted, --resume answers that row alone."""
    prompts = tmp_path / "prompts.txt"
    prompts.write_bytes(b"the cat sat\ncount : \xff\xfe five\nthe old\n")
    output = tmp_path / "out.jsonl"
    argv = ["generate", str(model), "--prompts-file", str(prompts), "--max-new-tokens", "4", "--output", str(output)]
    result = run_zerokit(argv, zk_env)
    assert result.returncode == 0, result.stderr[-3000:]
    place = f"{prompts} is not UTF-8 at line 2, byte 8 (byte 20 of the file: 0xff): convert it to UTF-8: iconv -f"
    warnings = [line for line in result.stderr.splitlines() if "warning" in line]
    assert len(warnings) == 1 and "(row 1)" in warnings[0] and place in warnings[0], result.stderr
    written = [json.loads(line) for line in output.read_text().splitlines()]
    assert [row["row"] for row in written] == [0, 1, 2]
    assert written[1]["error"].startswith(place) and "completion" not in written[1]
    assert written[0]["completion"] and written[2]["completion"]

    prompts.write_bytes(b"the cat sat\ncount : five\nthe old\n")  # converted
    resumed = run_zerokit([*argv, "--resume"], zk_env)
    assert resumed.returncode == 0 and "warning" not in resumed.stderr, resumed.stderr[-3000:]
    rows = [json.loads(line) for line in output.read_text().splitlines()]
    assert [row["row"] for row in rows] == [0, 1, 2] and rows[0] == written[0] and rows[2] == written[2]
    assert rows[1]["prompt"] == "count : five" and "error" not in rows[1] and rows[1]["completion"]
