"""Bad input to every command: one line naming the fix, exit 2, nothing written, and for what can be
checked without torch, torch never imported (a stand-in `torch` that fails on import proves it)."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest

from tests.conftest import run_zerokit


@pytest.fixture
def no_torch_env(zk_env: dict[str, str], tmp_path: Path) -> dict[str, str]:
    """zk_env where `import torch` fails loudly: an error seen instead means torch was not needed."""
    fake = tmp_path / "no-torch" / "torch"
    fake.mkdir(parents=True)
    (fake / "__init__.py").write_text("raise ImportError('TORCH WAS IMPORTED')\n")
    return {**zk_env, "PYTHONPATH": f"{fake.parent}{os.pathsep}{zk_env['PYTHONPATH']}"}


def one_line_error(result) -> str:
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert result.returncode == 2, result.stderr[-2000:]
    assert len(lines) == 1 and lines[0].startswith("error: "), result.stderr[-2000:]
    assert "TORCH WAS IMPORTED" not in result.stderr
    return lines[0]


def train(out: Path, *args: str) -> list[str]:
    return ["train", "--output-dir", str(out), *args]


@pytest.mark.parametrize(
    ("flags", "says"),
    [
        (["--lerning_rate", "1e-4"], "unknown flag --lerning_rate: did you mean --learning_rate?"),
        (["--learning_rat", "1e-4"], "unknown flag --learning_rat: did you mean --learning_rate?"),
        (["--block_size", "32"], "unknown flag --block_size: did you mean --block-size?"),  # zerokit's, as spelled
        (["--max_steps", "-5"], "--max_steps -5: must be at least 1"),
        (["--block-size", "1"], "--block-size (ZEROKIT_BLOCK_SIZE) must be at least 2"),
        (["--dataloader_num_workers", "-1"], "--dataloader_num_workers -1: must be zero or more"),  # was torch's
        (["--model", "/no/such/dir"], "--model /no/such/dir: no such folder"),
        (["--tokenizer", "./missing-tokenizer"], "--tokenizer ./missing-tokenizer: no such folder"),
        # written when training ends, before the model: found at the door, not after the run
        (["--timings-dir", "/etc/passwd/t"], "--timings-dir /etc/passwd/t: /etc/passwd is a file, not a folder"),
        (
            ["--memory-checkpoints", "2", "--memory-checkpoint-dir", "/etc/passwd/m"],
            "--memory-checkpoint-dir /etc/passwd/m: /etc/passwd is a file, not a folder",
        ),
        (
            ["--compile", "bogus"],
            "argument --compile: invalid choice: 'bogus' (choose from 'off', 'torch', "
            "'deepcompile') (`zerokit train --help` lists the flags)",
        ),  # argparse's, in one line too
    ],
)
def test_train_refuses_bad_flags_before_torch(tmp_path: Path, no_torch_env, flags: list[str], says: str):
    line = one_line_error(run_zerokit(train(tmp_path / "out", *flags), no_torch_env))
    assert says in line
    assert "prepare" not in line  # a path is never sent to the Hub
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize(
    ("flags", "environ", "says"),
    [
        (["--tp-size", "2", "--config", "none"], {}, "--tp-size 2 needs DeepSpeed (its AutoTP splits the model)"),
        (["--tp-size", "2", "--config", "zero3"], {}, "--tp-size 2 with ZeRO-3 (--config zero3): the Trainer"),
        (["--tp-size", "2", "--model-type", "llama"], {}, "this run has 1: add --nproc-per-node 2"),
        (["--nproc-per-node", "4", "--model-type", "llama"], {"ZEROKIT_TP_SIZE": "3"}, "--tp-size 3 does not divide "
         "the 4 ranks per node (--nproc-per-node): a tensor-parallel group must lie within one node"),
        (["--tp-size", "2", "--model-type", "llama"], {"RANK": "0", "LOCAL_RANK": "0", "WORLD_SIZE": "6",
         "LOCAL_WORLD_SIZE": "3", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "29999"},
         "--tp-size 2 does not divide the 3 ranks per node (WORLD_SIZE, LOCAL_WORLD_SIZE)"),
        (["--tp-size", "2", "--nproc-per-node", "2"], {}, "AutoTP cannot split gpt2 models (the embedded default"),
        (["--tp-size", "0"], {}, "--tp-size (ZEROKIT_TP_SIZE) must be at least 1, got 0"),
    ],
)  # fmt: skip
def test_train_refuses_tensor_parallel_layouts_before_torch(tmp_path: Path, no_torch_env, flags, environ, says):
    """A layout --tp-size cannot train fails before any rank starts (or, under a launcher, before torch)."""
    line = one_line_error(run_zerokit(train(tmp_path / "out", *flags), {**no_torch_env, **environ}))
    assert says in line
    assert not (tmp_path / "out").exists()


def test_train_refuses_a_config_that_sets_tensor_parallelism_itself(tmp_path: Path, no_torch_env):
    config = tmp_path / "tp.json"
    config.write_text(json.dumps({"zero_optimization": {"stage": 1}, "tensor_parallel": {"autotp_size": 2}}))
    line = one_line_error(run_zerokit(train(tmp_path / "out", "--config", str(config)), no_torch_env))
    says = "sets tensor_parallel.autotp_size 2, but --tp-size is 1: remove it from the file and pass --tp-size 2"
    assert says in line


def test_train_refuses_a_misspelt_deepspeed_config_before_any_rank_starts(tmp_path: Path, zk_env):
    """`"zero_optimisation"`: before, the job started and rank 0 died in deepspeed.initialize ("Please specify the
    ZeRO optimization config"). Now one line names the key and the nearest DeepSpeed reads, before the ranks of
    --nproc-per-node start (DeepSpeed's own keys: it is imported for them, so after the checks without torch)."""
    from zerokit.foundations.packages import installed_version

    config = tmp_path / "ds.json"
    config.write_text(json.dumps({"zero_optimisation": {"stage": 2}, "train_micro_batch_size_per_gpu": "auto"}))
    result = run_zerokit(train(tmp_path / "out", "--config", str(config), "--nproc-per-node", "2"), zk_env)
    assert one_line_error(result) == (
        f"error: DeepSpeed config {config}: unknown key zero_optimisation: did you mean zero_optimization? "
        f"(DeepSpeed {installed_version('deepspeed')} has no such key)"
    )
    assert not (tmp_path / "out").exists()


def test_a_config_that_disagrees_with_the_flags_is_one_line_before_the_run_writes(tmp_path: Path, zk_env):
    """HF refused it once DeepSpeed started, after the run had claimed its folder: a traceback from each rank, the
    folder's record left. Now when the TrainingArguments are built, said once, by rank 0 of the two
    (tests/unit/test_train_defaults.py has HF's other late refusals)."""
    fixed = tmp_path / "fixed7.json"
    fixed.write_text(json.dumps({"zero_optimization": {"stage": 2}, "train_batch_size": 7}))
    result = run_zerokit(train(tmp_path / "out", "--config", str(fixed), "--nproc-per-node", "2"), zk_env)
    errors = [line for line in result.stderr.splitlines() if line.startswith("error: ")]  # besides launch's own
    assert result.returncode == 2 and len(errors) == 1 and "Traceback" not in result.stderr, result.stderr[-2000:]
    assert errors[0].startswith(
        f"error: DeepSpeed config {fixed}: its values disagree with the flags (ds train_batch_size=7 vs hf "
        "train_batch_size (calculated)=32)"  # 16 a rank x 2
    )
    assert not (tmp_path / "out").exists()


def test_train_refuses_empty_and_binary_datasets_before_torch(tmp_path: Path, no_torch_env):
    empty = tmp_path / "empty.txt"
    empty.write_text("")
    assert "is empty" in one_line_error(run_zerokit(train(tmp_path / "o1", "--dataset", str(empty)), no_torch_env))
    binary = tmp_path / "weights.txt"
    binary.write_bytes(bytes(range(256)) * 64)
    line = one_line_error(run_zerokit(train(tmp_path / "o2", "--dataset", str(binary)), no_torch_env))
    assert "not UTF-8 text" in line or "binary" in line


def test_train_refuses_jsonl_that_is_not_json_in_one_line(tmp_path: Path, zk_env):
    broken = tmp_path / "data.jsonl"
    broken.write_text('{"text": "fine"}\n{"text": "cut off\n' * 50)
    result = run_zerokit(train(tmp_path / "out", "--dataset", str(broken), "--config", "none"), zk_env)
    lines = [line for line in result.stderr.splitlines() if line.startswith("error: ")]
    assert result.returncode == 2 and len(lines) == 1, result.stderr[-2000:]
    assert f"dataset {broken} cannot be read as json" in lines[0] and "Traceback" not in result.stderr


def test_train_model_folder_without_config(tmp_path: Path, no_torch_env):
    folder = tmp_path / "not-a-model"
    folder.mkdir()
    (folder / "readme.md").write_text("x")
    line = one_line_error(run_zerokit(train(tmp_path / "out", "--model", str(folder)), no_torch_env))
    assert "holds no config.json (it has readme.md)" in line


@pytest.mark.parametrize(
    ("files", "refusal"),
    [
        (["config.json"], "the folder holds a config but no weights (model.safetensors, "),
        (["config.json", "model.safetensors"], "no tokenizer files in it (tokenizer.json, tokenizer_config.json, ...): "
         "give --tokenizer FOLDER"),
    ],
)  # fmt: skip
def test_train_model_folder_without_weights_or_tokenizer_is_refused(tmp_path: Path, no_torch_env, files, refusal):
    """transformers 5 fills either in silently: fresh weights from the config, a tokenizer of one token."""
    folder = tmp_path / "model"
    folder.mkdir()
    for name in files:
        (folder / name).write_text("{}")
    line = one_line_error(run_zerokit(train(tmp_path / "out", "--model", str(folder)), no_torch_env))
    assert f"--model {folder}: {refusal}" in line
    assert not (tmp_path / "out").exists()


def test_generate_from_an_empty_folder_names_what_is_missing(tmp_path: Path, no_torch_env):
    line = one_line_error(run_zerokit(["generate", str(tmp_path), "--prompt", "x"], no_torch_env))
    assert "holds no config.json" in line and "sentencepiece" not in line


def test_universal_on_a_missing_folder_does_not_talk_about_resume(tmp_path: Path, no_torch_env):
    line = one_line_error(run_zerokit(["universal", str(tmp_path / "nope")], no_torch_env))
    assert "no such folder" in line and "--resume" not in line


def test_prepare_with_a_missing_tokenizer_is_one_line(tmp_path: Path, no_torch_env):
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("some text\n" * 10)
    argv = ["prepare", "tokenize", str(corpus), "--tokenizer", "/missing", "--output", str(tmp_path / "blocks")]
    assert "--tokenizer /missing: no such folder" in one_line_error(run_zerokit(argv, no_torch_env))
    corpus.write_text("")  # as train refuses it, before the tokenizer loads (this one would be the Hub's)
    argv = ["prepare", "tokenize", str(corpus), "--tokenizer", "gpt2", "--output", str(tmp_path / "blocks")]
    assert f"dataset {corpus} is empty: give a file with text in it" in one_line_error(run_zerokit(argv, no_torch_env))
    assert not (tmp_path / "blocks").exists()


def test_prepare_overwrite_never_deletes_a_folder_it_did_not_write(tmp_path: Path, zk_env):
    """Case 2 of issue 13: the corpus lives in the output folder; --overwrite must not delete it."""
    from zerokit.sources.embedded import prepare_embedded

    _, tokenizer = prepare_embedded(tmp_path / "embedded")
    folder = tmp_path / "corpusdir"
    folder.mkdir()
    corpus = folder / "corpus.txt"
    corpus.write_text("the cat sat on the mat\n" * 200)
    argv = ["prepare", "tokenize", str(corpus), "--tokenizer", str(tokenizer), "--block-size", "32"]
    line = one_line_error(run_zerokit([*argv, "--output", str(folder), "--overwrite"], zk_env))
    assert "holds files that prepare did not write" in line
    assert corpus.read_text().startswith("the cat")
    # Into a folder of its own, and again with --overwrite: replaced, as asked.
    blocks = tmp_path / "blocks"
    for extra in ([], ["--overwrite"]):
        result = run_zerokit([*argv, "--output", str(blocks), "--num-proc", "1", *extra], zk_env)
        assert result.returncode == 0, result.stderr[-2000:]
    assert (blocks / "zerokit-prepared.json").is_file()


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("just a few words\n", "1 row, too few to hold out 5% for validation"),
        ("a\n" * 30, "fewer tokens than one block"),
    ],
)
def test_train_refuses_a_corpus_too_small_to_train_on(tmp_path: Path, zk_env, text: str, says: str):
    tiny = tmp_path / "tiny.txt"
    tiny.write_text(text)
    result = run_zerokit(train(tmp_path / "out", "--dataset", str(tiny), "--model-type", "gpt2",
                               "--config-overrides", "n_layer=1,n_embd=32,n_head=2", "--block-size", "64",
                               "--config", "none"), zk_env)  # fmt: skip
    lines = [line for line in result.stderr.splitlines() if line.startswith("error: ")]
    assert result.returncode == 2 and len(lines) == 1, result.stderr[-2000:]
    assert says in lines[0] and "Traceback" not in result.stderr
    assert not (tmp_path / "out").exists()  # refused after the folder's lock was taken: it goes with the run


def test_the_default_llama_is_refused_before_it_is_built(tmp_path: Path, zk_env):
    """`train --model-type llama` builds transformers' default Llama, 6.5B parameters (its vocabulary fitted to the
    embedded tokenizer's): on a 24 GiB node the
    OOM killer ended it after 90 s (22.7 GB, exit 137, no word). The memory check refuses it in seconds."""
    from zerokit.cluster.node_memory import host_available

    if host_available() > 120 * 2**30:  # ZeRO-2 in fp32 on one CPU rank needs 121 GiB: this node would hold it
        pytest.skip("this node has room for the default Llama's model states")
    started = time.monotonic()
    result = run_zerokit(train(tmp_path / "out", "--model-type", "llama"), zk_env, timeout=60)
    line = one_line_error(result)
    assert line.startswith("error: not enough memory: this run needs at least 121 GiB of host memory"), line
    assert "6.48B parameters, ZeRO-2, fp32" in line and "--config zero3 over" in line, line
    assert time.monotonic() - started < 60


def placeholder_tokenizer(folder: Path, eos: bool, extra_tokens: int = 0) -> Path:
    """A word-level tokenizer of a few tokens (plus extra_tokens), with or without an end-of-text token."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab = {word: i for i, word in enumerate(["[UNK]", "a", "b", *(f"w{n}" for n in range(extra_tokens))])}
    core = Tokenizer(models.WordLevel(vocab, unk_token="[UNK]"))
    core.pre_tokenizer = pre_tokenizers.Whitespace()
    special = {"eos_token": "</s>"} if eos else {}
    PreTrainedTokenizerFast(tokenizer_object=core, unk_token="[UNK]", **special).save_pretrained(folder)
    return folder


@pytest.mark.parametrize(
    ("eos", "extra", "refusal"),
    [
        (True, 0, "has 4 tokens: not a trained tokenizer; give the one the model was trained with (--tokenizer "
         "FOLDER), or train one (tokenizers' trainers)"),
        (False, 100, "has no end-of-text token (eos_token), which packing puts between documents: give a tokenizer "
         "that has one, or set it (tokenizer.eos_token = ...; save_pretrained) before training"),
    ],
)  # fmt: skip
def test_a_placeholder_tokenizer_is_refused_before_any_text_is_packed(tmp_path: Path, zk_env, eos, extra, refusal):
    tokenizer = placeholder_tokenizer(tmp_path / "tokenizer", eos, extra)
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("a b a b\n" * 50)
    output = tmp_path / "prepared"
    result = run_zerokit(["prepare", "tokenize", str(corpus), "--tokenizer", str(tokenizer), "--output", str(output)],
                         zk_env)  # fmt: skip
    assert one_line_error(result) == f"error: tokenizer {tokenizer} {refusal}"
    assert not output.exists() and sorted(p.name for p in tmp_path.iterdir()) == ["corpus.txt", "tokenizer"]


@pytest.mark.parametrize("command", ["prepare", "train"])
def test_a_validation_split_without_a_whole_block_is_refused_before_the_work(tmp_path: Path, zk_env, command):
    """The run evaluates on it at the end: an empty one ended a finished training in a KeyError (eval_loss)."""
    from zerokit.sources.embedded import prepare_embedded

    files, tokenizer = prepare_embedded(tmp_path / "embedded")
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("".join(files["train"].read_text().splitlines(keepends=True)[:300]))  # 1% is 3 short lines
    output = tmp_path / "out"
    split = ["--validation-split-percentage", "1", "--block-size", "64"]
    if command == "prepare":
        argv = ["prepare", "tokenize", str(corpus), "--tokenizer", str(tokenizer), "--output", str(output), *split]
    else:
        argv = [*train(output, "--dataset", str(corpus), "--tokenizer", str(tokenizer), "--config", "none"), *split]
    result = run_zerokit(argv, zk_env)
    errors = [line for line in result.stderr.splitlines() if line.startswith("error")]  # after the progress bars
    assert result.returncode == 2 and len(errors) == 1 and "Traceback" not in result.stderr, result.stderr[-2000:]
    assert errors[0] == (
        f"error: dataset {corpus}: its validation split holds no whole block of 64 tokens, and the run evaluates on "
        "it: give more text, a higher --validation-split-percentage (where the split is taken from the training "
        "text), or a smaller --block-size"
    )
    assert not output.exists()


def test_weights_of_another_architecture_or_size_than_the_config_are_refused(tmp_path: Path, zk_env):
    """transformers fills what the weights lack with fresh values (a table among its warnings) and trains noise,
    or fails with a traceback on a tensor of another shape: a config.json that is not the weights' own."""
    from transformers import GPT2Config, GPT2LMHeadModel, LlamaConfig

    from zerokit.sources.embedded import prepare_embedded

    files, tokenizer = prepare_embedded(tmp_path / "embedded")
    gpt2 = GPT2Config(n_layer=1, n_embd=32, n_head=2, vocab_size=512, n_positions=64)
    configs = {
        "llama": LlamaConfig(
            hidden_size=32, intermediate_size=64, num_hidden_layers=1, num_attention_heads=2, vocab_size=512
        ),
        "wider": GPT2Config(n_layer=1, n_embd=64, n_head=2, vocab_size=512, n_positions=64),
    }
    for name, config in configs.items():
        GPT2LMHeadModel(gpt2).save_pretrained(tmp_path / name)
        config.save_pretrained(tmp_path / name)
        for file in tokenizer.iterdir():
            (tmp_path / name / file.name).write_bytes(file.read_bytes())
    argv = train(tmp_path / "out", "--model", str(tmp_path / "llama"), "--dataset", str(files["train"]))
    result = run_zerokit([*argv, "--config", "none", "--max_steps", "1"], zk_env)
    errors = [line for line in result.stderr.splitlines() if line.startswith("error: ")]
    assert result.returncode == 2 and errors == [
        f"error: --model {tmp_path / 'llama'}: its weights are not those of a LlamaForCausalLM, which its config.json "
        "names: 12 of its 12 tensors are missing from them, which hold other names (transformer.h.0.attn.c_attn.bias, "
        "...): give the config.json the weights were saved with"
    ], result.stderr[-3000:]
    assert "LOAD REPORT" not in result.stderr and "Traceback" not in result.stderr
    assert not (tmp_path / "out").exists()

    result = run_zerokit(["generate", str(tmp_path / "wider"), "--prompt", "the"], zk_env)
    errors = [line for line in result.stderr.splitlines() if line.startswith("error: ")]
    assert result.returncode == 2 and len(errors) == 1 and "Traceback" not in result.stderr, result.stderr[-3000:]
    assert errors[0].startswith(f"error: {tmp_path / 'wider'}: its weights have other shapes than its config.json")
