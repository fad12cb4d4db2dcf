"""Hugging Face offline: are `--model` and `--dataset` complete in the cache, so a node without network can start?

Paths come from the context's environment (HF_HOME, HF_HUB_CACHE, ...), passed to huggingface_hub explicitly:
its own constants were read from os.environ when it was imported.
"""

from __future__ import annotations

from pathlib import Path

from zerokit.doctor.context import Context
from zerokit.doctor.result import CheckResult, fail, ok, skip, warn
from zerokit.foundations.errors import UserError
from zerokit.sources.data import resolve_source
from zerokit.sources.hub_cache import NOT_DATA, TOKENIZER_FILES, cached_snapshot, missing_model_files
from zerokit.sources.model_source import is_path, require_model_folder


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
    if is_path(model):  # not a Hub id: train refuses it at the door, never looks it up
        try:
            require_model_folder("--model", model)
        except UserError as error:
            return fail(name, str(error).removeprefix(f"--model {model}: "), "give the folder save_pretrained wrote")
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
