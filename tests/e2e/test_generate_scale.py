"""`generate` at cluster scale, on CPU ranks (issue 30): a model larger than its device (disk offload), rows
shared by data-parallel ranks, tensor-parallel ranks (DeepSpeed AutoTP), a run killed and resumed, dataset
prompts (save_to_disk, csv, --sample, --stop, --chat), and inputs refused before the model loads.

Every run generates greedily from one tiny Llama, so each must give the one-process run's rows (`reference`),
byte for byte: the same batches on any number of ranks (zerokit.generate.ranks).
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.conftest import REPO, isolated_env, run_zerokit
from zerokit.generate.cli import main as generate_main
from zerokit.sources.data import PREPARED_NAME
from zerokit.sources.embedded import prepare_embedded

# Enough rows that a SIGTERM sent once the first rows are on disk lands seconds before the last (a loaded CI
# machine slows the run and the test alike), few enough that every run stays within seconds.
N = 192
ROWS = [
    {"question": f"what is {n} plus {n % 7}", "n": n} | ({"max_new_tokens": 3} if n % 5 == 0 else {}) for n in range(N)
]
LIMITED = sum(1 for row in ROWS if "max_new_tokens" in row)
# One row per batch: the most steps for a SIGTERM to land between, and the same batches on 1 or 2 ranks.
ARGS = ["--template", "Q: {question}\\nA:", "--max-new-tokens", "8", "--batch-size", "1"]
LAUNCH = ["launch", "--nproc-per-node", "2", "--no-preflight"]


@pytest.fixture(scope="module")
def env(tmp_path_factory) -> dict[str, str]:
    return isolated_env(tmp_path_factory.mktemp("generate-scale-env")) | {"OMP_NUM_THREADS": "1"}


@pytest.fixture(scope="module")
def folder(tmp_path_factory) -> Path:
    """A tiny random Llama (AutoTP splits Llama; not GPT-2) with the embedded tokenizer, and the rows."""
    import torch
    from transformers import AutoTokenizer, LlamaConfig, LlamaForCausalLM

    folder = tmp_path_factory.mktemp("generate-scale")
    tokenizer = AutoTokenizer.from_pretrained(prepare_embedded(folder / "embedded")[1])
    torch.manual_seed(0)
    size = {"hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2, "num_attention_heads": 4}
    ids = {"bos_token_id": tokenizer.eos_token_id, "eos_token_id": tokenizer.eos_token_id}
    config = LlamaConfig(vocab_size=len(tokenizer), num_key_value_heads=2, initializer_range=0.2, **size, **ids)
    LlamaForCausalLM(config).save_pretrained(folder / "model")
    tokenizer.save_pretrained(folder / "model")
    (folder / "rows.jsonl").write_text("".join(json.dumps(row) + "\n" for row in ROWS))
    return folder


@pytest.fixture(scope="module")
def reference(folder: Path, env: dict[str, str]) -> list[dict]:
    """The rows of one uninterrupted process, and its report."""
    output = folder / "reference.jsonl"
    argv = ["generate", str(folder / "model"), "--jsonl", str(folder / "rows.jsonl"), *ARGS, "--output", str(output)]
    result = run_zerokit([*argv, "--report", str(folder / "report.json")], env)
    assert result.returncode == 0, result.stderr[-3000:]
    assert f"generate: {N} rows (0 resumed) on 1 rank(s)" in result.stderr and "prompts/s" in result.stderr
    return [json.loads(line) for line in output.read_text().splitlines()]


def rows_of(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_one_process_keeps_each_rows_fields_and_limit_and_reports(folder: Path, reference: list[dict]):
    assert [row["row"] for row in reference] == list(range(N))
    for row, given in zip(reference, ROWS, strict=True):
        assert {k: row[k] for k in given} == given  # the row's own fields, kept
        assert row["prompt"] == f"Q: {given['question']}\nA:" and row["text"] == row["prompt"] + row["completion"]
    report = json.loads((folder / "report.json").read_text())
    assert report["rows"] == N and 0 < report["generated_tokens"] <= LIMITED * 3 + (N - LIMITED) * 8
    assert report["prompts_per_second"] > 0 and report["generated_tokens_per_second"] > 0
    assert report["first_token_seconds"]["median"] > 0 and report["peak_rss_bytes"] > 2**20


def test_two_data_parallel_ranks_write_the_one_process_rows(folder: Path, env, reference: list[dict], tmp_path: Path):
    output = tmp_path / "two.jsonl"
    argv = [*LAUNCH, "generate", str(folder / "model"), "--jsonl", str(folder / "rows.jsonl"), *ARGS]
    result = run_zerokit([*argv, "--output", str(output)], env)
    assert result.returncode == 0, result.stderr[-3000:]
    assert output.read_text() == (folder / "reference.jsonl").read_text()
    assert "on 2 rank(s), tp 1" in result.stderr


def test_killed_then_resumed_on_two_ranks_gives_the_uninterrupted_file(folder: Path, env, tmp_path: Path, reference):
    output = tmp_path / "out.jsonl"
    partial = tmp_path / ".out.jsonl.partial"
    argv = ["generate", str(folder / "model"), "--jsonl", str(folder / "rows.jsonl"), *ARGS, "--output", str(output)]
    run = subprocess.Popen([sys.executable, "-m", "zerokit", *argv], env=env, cwd=REPO, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 120
    while not (partial.is_file() and partial.read_bytes().count(b"\n") >= 2) and run.poll() is None:
        assert time.monotonic() < deadline
        time.sleep(0.002)
    run.send_signal(signal.SIGTERM)  # a job's time limit, after its first rows are on disk
    assert run.wait(60) == -signal.SIGTERM
    kept = rows_of(partial)
    assert 2 <= len(kept) < N and not output.exists()  # an interrupted run leaves no output, only its rows
    assert kept == reference[: len(kept)]

    refused = run_zerokit(argv, env)
    assert refused.returncode == 2 and "pass --resume" in refused.stderr

    resumed = run_zerokit([*LAUNCH, *argv, "--resume"], env)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert f"{N - len(kept)} rows ({len(kept)} resumed) on 2 rank(s)" in resumed.stderr
    assert output.read_text() == (folder / "reference.jsonl").read_text() and not partial.exists()


def test_two_tensor_parallel_groups_of_two_ranks_give_the_one_process_tokens(folder: Path, env, reference, tmp_path):
    """4 ranks, --tp-size 2: two AutoTP groups (ranks 0-1 and 2-3), each a data-parallel share of the rows."""
    output = tmp_path / "tp.jsonl"
    launch = ["launch", "--nproc-per-node", "4", "--no-preflight"]
    argv = [*launch, "generate", str(folder / "model"), "--jsonl", str(folder / "rows.jsonl"), *ARGS]
    result = run_zerokit([*argv, "--tp-size", "2", "--sample", "6", "--seed", "1", "--output", str(output)], env)
    assert result.returncode == 0, result.stderr[-3000:]
    rows = rows_of(output)
    assert len(rows) == 6 and rows == [reference[row["row"]] for row in rows]
    assert "on 4 rank(s), tp 2" in result.stderr


def test_weights_offloaded_to_disk_give_the_plain_tokens(folder: Path, reference: list[dict], tmp_path: Path, caplog):
    """A memory budget that holds no layer: accelerate puts every weight on disk and loads each as it runs (from
    the safetensors file itself: the offload folder stays empty)."""
    output, offload = tmp_path / "offload.jsonl", tmp_path / "offload"
    argv = [str(folder / "model"), "--jsonl", str(folder / "rows.jsonl"), *ARGS, "--sample", "3", "--seed", "2"]
    argv += ["--device-map", "auto", "--max-memory", "cpu=150KB", "--offload-folder", str(offload)]
    assert generate_main([*argv, "--dtype", "fp32", "--output", str(output)]) == 0
    assert "offloaded to the disk" in caplog.text
    rows = rows_of(output)
    assert len(rows) == 3 and rows == [reference[row["row"]] for row in rows]


def test_dataset_prompts_as_users_have_them(folder: Path, reference: list[dict], tmp_path: Path):
    import datasets

    questions = [{"question": row["question"]} for row in ROWS[1:5]]  # rows 1-4, none with a limit of its own
    saved = tmp_path / "saved"
    datasets.DatasetDict(test=datasets.Dataset.from_list(questions)).save_to_disk(str(saved))
    (tmp_path / "rows.csv").write_text("question\n" + "".join(f"{q['question']}\n" for q in questions))
    completion = reference[1]["completion"]
    stop = next(c for c in completion[1:] if c.isascii() and c.isalnum())  # a letter row 1's completion holds
    for source in (["--dataset", str(saved), "--split", "test"], ["--dataset", str(tmp_path / "rows.csv")]):
        output = tmp_path / "out.jsonl"
        assert (
            generate_main(
                [str(folder / "model"), *source, *ARGS, "--stop", stop, "--overwrite", "--output", str(output)]
            )
            == 0
        )
        rows = rows_of(output)
        assert [row["question"] for row in rows] == [q["question"] for q in questions]
        for row, expected in zip(rows, reference[1:5], strict=True):
            assert row["completion"] == expected["completion"].split(stop)[0]
        assert rows[0]["completion"] == completion.split(stop)[0] != completion


def test_chat_puts_the_prompt_in_the_tokenizers_template(folder: Path, tmp_path: Path):
    from transformers import AutoTokenizer

    chat_model = tmp_path / "chat"
    chat_model.mkdir()
    for path in (folder / "model").iterdir():
        (chat_model / path.name).symlink_to(path)
    (chat_model / "tokenizer_config.json").unlink()
    tokenizer = AutoTokenizer.from_pretrained(folder / "model")
    tokenizer.chat_template = "{% for m in messages %}User: {{ m['content'] }}\nAssistant:{% endfor %}"
    tokenizer.save_pretrained(chat_model)
    output = tmp_path / "chat.jsonl"
    assert generate_main([str(chat_model), "--chat", "--prompt", "three plus four", "--output", str(output)]) == 0
    (row,) = rows_of(output)
    assert row["prompt"] == "three plus four" and row["text"].startswith("User: three plus four\nAssistant:")


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--template", "{topic}: {question}"], "rows.jsonl:3: no field 'topic' for the template"),
        (["--chat"], "has no chat template: drop --chat"),
        (["--dataset", "{prepared}"], "was written by `prepare tokenize`: it holds token blocks, not prompts"),
        (["--resume", "--template", "{question}?"], "holds row 0 made from another prompt than this run's"),
        (["--tp-size", "3"], "--tp-size 3 does not divide the 1 ranks"),
    ],
)
def test_bad_inputs_fail_in_one_line_before_the_model_loads(folder: Path, env, tmp_path, extra, message):
    """The model's weights here are garbage: each run must fail on its input before it reads them."""
    broken = tmp_path / "broken"
    broken.mkdir()
    for path in (folder / "model").iterdir():
        (broken / path.name).symlink_to(path)
    (broken / "model.safetensors").unlink()
    (broken / "model.safetensors").write_text("not weights")
    (tmp_path / "prepared").mkdir()
    (tmp_path / "prepared" / PREPARED_NAME).write_text("{}")
    rows = tmp_path / "rows.jsonl"
    rows.write_text(
        "".join(
            json.dumps(row) + "\n"
            for row in [{"question": "a", "topic": "x"}, {"question": "b", "topic": "y"}, {"question": "c"}]
        )
    )
    output = tmp_path / "out.jsonl"
    (tmp_path / ".out.jsonl.partial").write_text(json.dumps({"row": 0, "prompt": "a"}) + "\n")
    argv = ["generate", str(broken), *ARGS, "--output", str(output)]
    argv += [] if "--dataset" in extra else ["--jsonl", str(rows)]
    argv += [arg.replace("{prepared}", str(tmp_path / "prepared")) for arg in extra]
    if "--chat" in extra or "--tp-size" in extra:
        argv += ["--overwrite"]
    result = run_zerokit(argv, env)
    assert result.returncode == 2
    assert len(result.stderr.strip().splitlines()) == 1 and message in result.stderr, result.stderr[-2000:]
    assert not (tmp_path / ".out.jsonl.lock").exists()  # refused after the output's lock (--resume's check): it went
    interrupted = json.dumps({"row": 0, "prompt": "a"}) + "\n"
    assert (tmp_path / ".out.jsonl.partial").read_text() == interrupted  # kept by a refused --overwrite too
