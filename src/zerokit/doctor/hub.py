"""Hugging Face offline: are `--model` and `--dataset` complete in the cache, so a node without network can start?

Paths come from the context's environment (HF_HOME, HF_HUB_CACHE, ...), passed to huggingface_hub explicitly:
its own constants were read from os.environ when it was imported.
"""

from __future__ import annotations

import json
from pathlib import Path

from zerokit.data import resolve_source
from zerokit.doctor.context import Context
from zerokit.doctor.result import CheckResult, fail, ok, skip, warn
from zerokit.errors import UserError

WEIGHT_FILES = ("model.safetensors", "pytorch_model.bin")
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "vocab.json", "tokenizer.model", "spiece.model")
NOT_DATA = {"README.md", ".gitattributes"}


def hf_home(ctx: Context) -> Path:
    return Path(ctx.environ.get("HF_HOME") or ctx.xdg_cache / "huggingface")


def hub_cache(ctx: Context) -> Path:
    explicit = ctx.environ.get("HF_HUB_CACHE") or ctx.environ.get("HUGGINGFACE_HUB_CACHE")
    return Path(explicit) if explicit else hf_home(ctx) / "hub"


def datasets_cache(ctx: Context) -> Path:
    return Path(ctx.environ.get("HF_DATASETS_CACHE") or hf_home(ctx) / "datasets")


def offline(ctx: Context) -> bool:
    return any(ctx.flag(v) for v in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE", "HF_DATASETS_OFFLINE"))


def prepare_fix(flag: str, name: str, ctx: Context) -> str:
    return (
        f"stage it where there is network, into the HF_HOME the nodes use ({hf_home(ctx)}): "
        f"`zerokit prepare {flag} {name}`"
    )


def check_hub(ctx: Context) -> list[CheckResult]:
    if not ctx.model and not ctx.dataset:
        mode = "offline (HF_HUB_OFFLINE=1)" if offline(ctx) else "online"
        return [skip("hf: cache", f"{mode}; name --model/--dataset to check that they are cached")]
    results = [check_model(ctx, ctx.model)] if ctx.model else []
    return results + ([check_dataset(ctx, ctx.dataset)] if ctx.dataset else [])


def cached_snapshot(repo_id: str, repo_type: str, cache: Path) -> tuple[Path | None, str]:
    """The cached snapshot of the main revision, or None and why; never touches the network."""
    from huggingface_hub import snapshot_download
    from huggingface_hub.errors import IncompleteSnapshotError, LocalEntryNotFoundError

    try:
        folder = snapshot_download(repo_id, repo_type=repo_type, cache_dir=cache, local_files_only=True)
    except IncompleteSnapshotError as error:
        return None, f"incomplete in {cache}: {str(error).split(' Outgoing')[0]}"
    except LocalEntryNotFoundError:
        return None, f"not in the cache {cache}"
    except ValueError as error:  # HFValidationError: not a valid repo id
        return None, f"not a Hub id ({error})"
    return Path(folder), ""


def missing_model_files(folder: Path) -> list[str]:
    """What from_pretrained needs: config.json and the weights, every shard an index names."""
    missing = [] if (folder / "config.json").is_file() else ["config.json"]
    for weights in WEIGHT_FILES:
        index = folder / f"{weights}.index.json"
        if index.is_file():
            shards = sorted(set(json.loads(index.read_text()).get("weight_map", {}).values()))
            return missing + [shard for shard in shards if not (folder / shard).is_file()]
        if (folder / weights).is_file():
            return missing
    return [*missing, " or ".join(WEIGHT_FILES)]


def unavailable(ctx: Context, name: str, detail: str, flag: str, what: str) -> CheckResult:
    fix = prepare_fix(flag, what, ctx)
    if offline(ctx):
        return fail(name, f"{detail}; HF_HUB_OFFLINE=1, so loading it fails", fix)
    return warn(name, f"{detail}; it would be downloaded at start (fails on nodes without network)", fix)


def check_model(ctx: Context, model: str) -> CheckResult:
    name = f"hf: model {model}"
    local = Path(model).expanduser()
    if local.is_dir():
        missing = missing_model_files(local)
        if missing:
            return fail(
                name,
                f"local folder {local} lacks {', '.join(missing)}",
                "point --model at a folder written by save_pretrained",
            )
        return ok(name, f"local folder {local}")
    folder, why = cached_snapshot(model, "model", hub_cache(ctx))
    if folder is None:
        return unavailable(ctx, name, why, "--model", model)
    missing = missing_model_files(folder)
    if missing:
        return unavailable(ctx, name, f"cached but lacks {', '.join(missing)} ({folder})", "--model", model)
    if not any((folder / f).is_file() for f in TOKENIZER_FILES):
        return warn(name, f"cached without a tokenizer ({folder})", prepare_fix("--model", model, ctx))
    return ok(name, f"complete in the cache ({folder})")


def check_dataset(ctx: Context, dataset: str) -> CheckResult:
    name = f"hf: dataset {dataset}"
    try:
        source = resolve_source(dataset)  # the same decision `train --dataset` makes
    except UserError as error:
        return fail(name, str(error), "give an existing file or folder, or a Hub dataset name")
    if source.kind != "hub":
        return ok(name, f"local ({source.kind}): {source.location}")
    folder, why = cached_snapshot(dataset, "dataset", hub_cache(ctx))
    if folder is not None and any(p.is_file() and p.name not in NOT_DATA for p in folder.rglob("*")):
        return ok(name, f"complete in the cache ({folder})")
    # datasets can also reload its prepared Arrow files offline, without the Hub files.
    prepared = datasets_cache(ctx) / dataset.replace("/", "___")
    if prepared.is_dir() and any(prepared.rglob("*.arrow")):
        return ok(name, f"prepared Arrow files in {prepared}")
    return unavailable(ctx, name, why or f"cached without data files ({folder})", "--dataset", dataset)
