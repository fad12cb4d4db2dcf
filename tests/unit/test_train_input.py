"""Bad input to `train` is refused in one line, with a non-zero exit, before anything is written."""

from __future__ import annotations

import base64
import json
from pathlib import Path

import pytest

from tests.conftest import run_zerokit
from zerokit.foundations.errors import UserError
from zerokit.sources.ds_configs import bundled, resolve_ds_config
from zerokit.train.ds_settings import DeepSpeedSettings
from zerokit.train.options import ds_config_argument


def error_lines(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if line.strip()]


def test_config_that_is_not_json_is_refused(tmp_path: Path, zk_env):
    bad = tmp_path / "zero3.json"
    bad.write_text('{"zero_optimization": {"stage": 3,}}')
    result = run_zerokit(["train", "--config", str(bad), "--output-dir", str(tmp_path / "out")], zk_env)
    assert result.returncode == 2
    assert len(error_lines(result.stderr)) == 1
    assert "is not valid JSON (line 1" in result.stderr and str(bad) in result.stderr
    assert not (tmp_path / "out").exists()


def test_unknown_bundled_config_lists_the_bundled_ones(tmp_path: Path, zk_env):
    result = run_zerokit(["train", "--config", "zero4", "--output-dir", str(tmp_path / "out")], zk_env)
    assert result.returncode == 2
    assert "DeepSpeed config not found: zero4" in result.stderr
    assert "zero1, zero2, zero3, zero3-offload" in result.stderr


def test_missing_dataset_path_is_refused(tmp_path: Path, zk_env):
    missing = tmp_path / "corpus.txt"
    result = run_zerokit(["train", "--dataset", str(missing), "--output-dir", str(tmp_path / "out")], zk_env)
    assert result.returncode == 2
    assert len(error_lines(result.stderr)) == 1
    assert f"dataset not found: {missing}" in result.stderr


def test_existing_output_folder_is_not_overwritten(tmp_path: Path, zk_env):
    out = tmp_path / "out"
    out.mkdir()
    keep = out / "model.safetensors"
    keep.write_bytes(b"weights of an earlier run")
    result = run_zerokit(["train", "--output-dir", str(out)], zk_env)
    assert result.returncode == 2
    assert len(error_lines(result.stderr)) == 1
    assert "exists and is not empty" in result.stderr and "--overwrite" in result.stderr
    assert keep.read_bytes() == b"weights of an earlier run"
    assert sorted(p.name for p in out.iterdir()) == ["model.safetensors"]


@pytest.mark.parametrize("flag", ["--nproc-per-node=0", "--from-scratch"])
def test_invalid_flag_combinations(tmp_path: Path, zk_env, flag: str):
    result = run_zerokit(["train", flag, "--output-dir", str(tmp_path / "out")], zk_env)
    assert result.returncode == 2
    assert result.stderr.startswith("error: ")


def decoded(argument: str) -> dict:
    return json.loads(base64.urlsafe_b64decode(argument))


def settings(name: str) -> DeepSpeedSettings:
    """A bundled config's record, as a run's options carry it."""
    return DeepSpeedSettings.read(bundled(name))


def test_deterministic_config_runs_adam_in_torch_except_when_offloaded():
    zero3 = resolve_ds_config("zero3")
    assert ds_config_argument(settings("zero3")) == str(zero3)  # nothing asked: the file itself
    config = decoded(ds_config_argument(settings("zero3"), deterministic_cpu=True))
    assert config["optimizer"]["params"]["torch_adam"] is True and "checkpoint" not in config
    assert config["zero_optimization"] == json.loads(zero3.read_text())["zero_optimization"]
    offload = resolve_ds_config("zero3-offload")  # ZeRO-Offload needs DeepSpeed's CPU Adam: untouched
    assert ds_config_argument(settings("zero3-offload"), deterministic_cpu=True) == str(offload)


def test_deterministic_cpu_caps_zero2s_buckets_which_it_would_fill_at_every_micro_step():
    from zerokit.train.options import DETERMINISTIC_BUCKET

    file = json.loads(resolve_ds_config("zero2").read_text())["zero_optimization"]
    zero = decoded(ds_config_argument(settings("zero2"), deterministic_cpu=True))["zero_optimization"]
    assert file["reduce_bucket_size"] > DETERMINISTIC_BUCKET  # 5e8: 4 GB filled a step on CPU ranks
    assert zero["reduce_bucket_size"] == zero["allgather_bucket_size"] == DETERMINISTIC_BUCKET
    assert {k: v for k, v in zero.items() if "bucket" not in k} == {k: v for k, v in file.items() if "bucket" not in k}
    assert settings("zero2").raw["zero_optimization"] == file  # the record's copy of the file is left as it was


def test_universal_resume_sets_load_universal():
    config = decoded(ds_config_argument(settings("zero3-offload"), load_universal=True))
    assert config["checkpoint"] == {"load_universal": True}
    assert "torch_adam" not in config["optimizer"]["params"]


def test_tensor_parallel_sets_autotp_and_a_whole_model_at_save():
    config = decoded(ds_config_argument(settings("zero2"), tp_size=2))
    assert config["tensor_parallel"] == {"autotp_size": 2}
    assert config["zero_optimization"]["stage3_gather_16bit_weights_on_model_save"] is True
    assert config["zero_optimization"]["stage"] == 2
    assert ds_config_argument(settings("zero2"), tp_size=1) == str(resolve_ds_config("zero2"))


@pytest.mark.parametrize("chunk_bytes", [7, 1 << 20])  # the bad byte in a later chunk, or in the first
def test_a_text_dataset_with_a_byte_that_is_not_utf8_anywhere_is_named_by_line_and_byte(tmp_path: Path, chunk_bytes):
    from zerokit.sources.data import check_text_files, resolve_source

    corpus = tmp_path / "corpus.txt"
    corpus.write_bytes("first line\nsecond é line\nthird\xff".encode().replace(b"\xc3\xbf", b"\xff") + b" end\n")
    with pytest.raises(UserError) as refused:
        check_text_files(resolve_source(str(corpus)), chunk_bytes=chunk_bytes)
    offset = corpus.read_bytes().index(b"\xff")
    assert f"is not UTF-8 text at line 3, byte 5 (byte {offset} of the file: 0xff): convert it to UTF-8: iconv" in str(
        refused.value
    )
    corpus.write_text("first line\nsecond é line\n" * 10)  # é split across chunks: still text
    check_text_files(resolve_source(str(corpus)), chunk_bytes=chunk_bytes)


def test_nproc_per_node_runs_as_zerokit_launch_with_ranks_that_do_not_spawn_again():
    """train --nproc-per-node N becomes `zerokit launch` (a process, exec'd: not launch's CLI imported into train)."""
    import sys

    from zerokit.train.cli import launch_argv

    argv = ["--nproc-per-node", "2", "--max_steps", "3", "--nproc_per_node=2", "--output-dir", "out"]
    assert launch_argv(argv, 2) == [
        sys.executable, "-m", "zerokit", "launch", "--nproc-per-node", "2", "train", "--max_steps", "3",
        "--output-dir", "out",
    ]  # fmt: skip


def test_a_folder_of_jsonl_shards_is_one_dataset_and_a_folder_of_mixed_kinds_is_refused(tmp_path: Path):
    """A folder of .jsonl shards was refused ("no .txt files"); .json files beside .txt ones were left out."""
    from zerokit.foundations.errors import UserError
    from zerokit.sources.data import resolve_source

    shards = tmp_path / "shards"
    (shards / "part").mkdir(parents=True)
    for name in ("part/00.jsonl", "01.jsonl"):
        (shards / name).write_text('{"text": "hello"}\n')
    (shards / ".zerokit-output.json").write_text("{}")  # a hidden record is not data
    source = resolve_source(str(shards))
    assert (source.loader, [Path(f).name for f in source.data_files]) == ("json", ["01.jsonl", "00.jsonl"])
    (shards / "notes.txt").write_text("mine")
    with pytest.raises(UserError, match=r"holds files of several kinds \(2 json, 1 text\): give a folder of one kind"):
        resolve_source(str(shards))


def test_an_empty_output_dir_is_refused_not_read_as_the_working_folder():
    """`--output-dir "$OUT"` with OUT unset was `.`, refused as a folder that is not empty: the wrong line."""
    from zerokit.foundations.errors import UserError
    from zerokit.train.cli import parse

    with pytest.raises(UserError, match=r"^--output-dir \(ZEROKIT_OUTPUT_DIR\) is empty: give a folder"):
        parse(["--output-dir", ""])
    assert parse(["--output-dir", "runs/x"])[0].output_dir == Path("runs/x")


def test_blank_lines_only_are_refused_and_a_batch_of_them_in_a_corpus_tokenizes_to_nothing(tmp_path: Path):
    """A file of white space passed the empty-file check and ended every rank in an IndexError: transformers'
    tokenizers fail on an empty list, which a batch of blank lines left (a long run of them in a real corpus too)."""
    from transformers import AutoTokenizer

    from zerokit.sources.data import block_functions, check_text_files, resolve_source
    from zerokit.sources.embedded import prepare_embedded

    blank = tmp_path / "blank.txt"
    blank.write_text(" \n\n\t\n" * 100)
    with pytest.raises(UserError, match=f"^dataset {blank} holds only blank lines: give a file with text in it$"):
        check_text_files(resolve_source(str(blank)))
    _, folder = prepare_embedded(tmp_path / "embedded")
    tokenize, group = block_functions(AutoTokenizer.from_pretrained(folder), "text", block_size=4)
    assert tokenize({"text": ["", "  ", "\t"]}) == {"input_ids": [], "attention_mask": []}
    assert len(group(tokenize({"text": ["", "the cat sat on the mat and more"]}))["input_ids"]) >= 1


def test_a_folder_saved_in_bf16_trains_from_fp32_weights(tmp_path: Path):
    """transformers 5 loads a folder in the dtype it was saved in: a bf16 folder trained with bf16 weights and
    optimizer states in an fp32 run, its record saying fp32."""
    import torch
    from transformers import AutoConfig, GPT2Config, GPT2LMHeadModel

    from zerokit.train.model.loading import load_model
    from zerokit.train.options import TrainFlags

    folder = tmp_path / "bf16"
    GPT2LMHeadModel(GPT2Config(n_layer=1, n_embd=32, n_head=2, vocab_size=64, n_positions=16)).to(
        torch.bfloat16
    ).save_pretrained(folder)
    model = load_model(TrainFlags(model=str(folder)), AutoConfig.from_pretrained(folder))
    assert {parameter.dtype for parameter in model.parameters()} == {torch.float32}
