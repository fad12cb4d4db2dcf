"""HF offline: a model or dataset missing from the cache fails (offline) naming `prepare`; a complete one passes.

The cached repos are written in huggingface_hub's cache layout (refs/main -> snapshots/<commit>/files),
which is what `snapshot_download(local_files_only=True)` reads.
"""

from __future__ import annotations

import json
from pathlib import Path

from tests.unit.doctor.conftest import context, failures, run_main
from zerokit.doctor.hub import check_hub

COMMIT = "0123456789abcdef0123456789abcdef01234567"


def cache_repo(hf_home: Path, repo_type: str, repo_id: str, files: dict[str, str]) -> Path:
    folder = hf_home / "hub" / f"{repo_type}s--{repo_id.replace('/', '--')}"
    (folder / "refs").mkdir(parents=True)
    (folder / "refs" / "main").write_text(COMMIT)
    snapshot = folder / "snapshots" / COMMIT
    for name, text in files.items():
        (snapshot / name).parent.mkdir(parents=True, exist_ok=True)
        (snapshot / name).write_text(text)
    return snapshot


def offline(environ: dict[str, str]) -> dict[str, str]:
    return {**environ, "HF_HUB_OFFLINE": "1"}


def test_offline_cache_without_the_model_fails_naming_prepare(environ, capsys):
    code, rows = run_main(["--model", "gpt2", "--strict"], offline(environ), capsys)
    assert code == 1
    assert failures(rows) == ["hf: model gpt2"]
    (row,) = [r for r in rows if r["name"] == "hf: model gpt2"]
    assert row["detail"] == f"not in the cache {environ['HF_HOME']}/hub; HF_HUB_OFFLINE=1, so loading it fails"
    assert "`zerokit prepare --model gpt2`" in row["fix"] and environ["HF_HOME"] in row["fix"]


def test_online_a_missing_model_only_warns(environ):
    (result,) = check_hub(context(environ, model="gpt2"))
    assert result.status == "warn" and "downloaded at start" in result.detail


def test_a_path_that_is_no_folder_fails_as_train_refuses_it(environ, tmp_path):
    """A path is never a Hub id: not "it would be downloaded at start", but the line train refuses it with."""
    (missing,) = check_hub(context(environ, model=str(tmp_path / "typo")))
    assert (missing.status, missing.detail) == ("fail", "no such folder (a local path; a Hub id looks like org/name): "
                                                "check the path")  # fmt: skip
    (tmp_path / "file").write_text("x")
    (a_file,) = check_hub(context(environ, model=str(tmp_path / "file")))
    assert (a_file.status, a_file.detail) == ("fail", "is a file; give the folder that holds it")


def test_a_complete_cached_model_passes(environ):
    files = {"config.json": "{}", "model.safetensors": "x", "tokenizer.json": "{}"}
    snapshot = cache_repo(Path(environ["HF_HOME"]), "model", "zk/tiny", files)
    (result,) = check_hub(context(offline(environ), model="zk/tiny"))
    assert (result.status, result.detail) == ("ok", f"complete in the cache ({snapshot})")


def test_a_sharded_model_missing_a_shard_fails_naming_it(environ):
    index = {"weight_map": {"a": "model-00001-of-00002.safetensors", "b": "model-00002-of-00002.safetensors"}}
    files = {
        "config.json": "{}",
        "model.safetensors.index.json": json.dumps(index),
        "model-00001-of-00002.safetensors": "x",
        "tokenizer.json": "{}",
    }
    cache_repo(Path(environ["HF_HOME"]), "model", "zk/sharded", files)
    (result,) = check_hub(context(offline(environ), model="zk/sharded"))
    assert result.status == "fail"
    assert result.detail.startswith("cached but lacks model-00002-of-00002.safetensors")
    assert "`zerokit prepare --model zk/sharded`" in result.fix


def test_a_model_without_weights_fails(environ):
    cache_repo(Path(environ["HF_HOME"]), "model", "zk/configonly", {"config.json": "{}"})
    (result,) = check_hub(context(offline(environ), model="zk/configonly"))
    assert result.status == "fail" and "lacks model.safetensors or pytorch_model.bin" in result.detail


def test_hf_hub_cache_wins_over_hf_home(environ, tmp_path: Path):
    elsewhere = tmp_path / "elsewhere"
    cache_repo(elsewhere, "model", "zk/tiny", {"config.json": "{}", "model.safetensors": "x", "vocab.json": "{}"})
    env = {**offline(environ), "HF_HUB_CACHE": str(elsewhere / "hub")}
    assert check_hub(context(env, model="zk/tiny"))[0].status == "ok"
    assert check_hub(context(offline(environ), model="zk/tiny"))[0].status == "fail"


def test_a_local_model_folder(tmp_path: Path, environ):
    folder = tmp_path / "model"
    folder.mkdir()
    (folder / "config.json").write_text("{}")
    (result,) = check_hub(context(offline(environ), model=str(folder)))
    assert result.status == "fail" and "lacks model.safetensors or pytorch_model.bin" in result.detail
    (folder / "model.safetensors").write_text("x")
    assert check_hub(context(offline(environ), model=str(folder)))[0].status == "ok"


def test_offline_cache_without_the_dataset_fails_naming_prepare(environ, capsys):
    code, rows = run_main(["--dataset", "zk/corpus", "--strict"], offline(environ), capsys)
    assert code == 1
    assert failures(rows) == ["hf: dataset zk/corpus"]
    (row,) = [r for r in rows if r["name"] == "hf: dataset zk/corpus"]
    assert "`zerokit prepare --dataset zk/corpus`" in row["fix"]


def test_a_cached_dataset_passes_and_one_without_data_fails(environ):
    hf_home = Path(environ["HF_HOME"])
    cache_repo(hf_home, "dataset", "zk/corpus", {"README.md": "# corpus", "data/train.txt": "hello"})
    assert check_hub(context(offline(environ), dataset="zk/corpus"))[0].status == "ok"
    cache_repo(hf_home, "dataset", "zk/readme-only", {"README.md": "# nothing"})
    (result,) = check_hub(context(offline(environ), dataset="zk/readme-only"))
    assert result.status == "fail" and result.detail.startswith("cached without data files")


def test_prepared_arrow_files_count_as_available(environ):
    prepared = Path(environ["HF_HOME"]) / "datasets" / "zk___corpus" / "default" / "0.0.0"
    prepared.mkdir(parents=True)
    (prepared / "corpus-train.arrow").write_text("x")
    (result,) = check_hub(context(offline(environ), dataset="zk/corpus"))
    assert result.status == "ok" and "prepared Arrow files" in result.detail


def test_local_dataset_files(tmp_path: Path, environ):
    text = tmp_path / "train.txt"
    text.write_text("hello\n")
    assert check_hub(context(environ, dataset=str(text)))[0].status == "ok"
    (missing,) = check_hub(context(environ, dataset=str(tmp_path / "gone.txt")))
    assert missing.status == "fail" and "dataset not found" in missing.detail


def test_nothing_named_is_skipped(environ):
    (result,) = check_hub(context(offline(environ)))
    assert result.status == "skip" and result.detail.startswith("offline (HF_HUB_OFFLINE=1)")


def test_an_empty_hf_home_is_left_as_it_was(environ):
    check_hub(context(offline(environ), model="gpt2", dataset="zk/corpus"))
    assert list(Path(environ["HF_HOME"]).iterdir()) == []
