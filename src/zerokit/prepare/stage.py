"""`prepare --model NAME --dataset NAME`: download into HF_HOME where there is network, for offline nodes.

The real Hub code paths (huggingface_hub.snapshot_download, datasets.load_dataset) fill the
HF cache the nodes read with HF_HUB_OFFLINE=1. A gated model takes its token from HF_TOKEN at
run time; it is never stored.
"""

from __future__ import annotations

import os
from pathlib import Path

from zerokit.foundations.errors import UserError
from zerokit.prepare.manifest import MANIFEST_NAME, entry, file_hashes, update_manifest

OFFLINE_VARIABLES = ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE", "TRANSFORMERS_OFFLINE")


def check_online(environ) -> None:
    set_offline = [v for v in OFFLINE_VARIABLES if environ.get(v, "").lower() in ("1", "true", "yes", "on")]
    if set_offline:
        raise UserError(
            f"prepare downloads, but {', '.join(set_offline)}=1: run it where there is network, with them unset"
        )


def stage_model(name: str, revision: str | None) -> dict:
    """Model + tokenizer files of one revision into the hub cache; the manifest entry."""
    from huggingface_hub import snapshot_download
    from huggingface_hub.errors import GatedRepoError, RepositoryNotFoundError, RevisionNotFoundError

    try:
        folder = Path(snapshot_download(name, revision=revision))
    except GatedRepoError:
        raise UserError(f"model {name} is gated: accept its terms on the Hub, then run with HF_TOKEN set") from None
    except (RepositoryNotFoundError, RevisionNotFoundError) as error:
        raise UserError(f"model {name}: {str(error).splitlines()[0]}") from None
    files = file_hashes(list(folder.rglob("*")), folder)
    return entry("model", name, revision=folder.name, files=files, requested_revision=revision or "main")


# The files AutoTokenizer reads from a repo (sentencepiece, tiktoken and BPE vocabularies included),
# for a tokenizer staged without its model's weights.
TOKENIZER_FILES = [
    "tokenizer*", "special_tokens_map.json", "added_tokens.json", "vocab*", "merges.txt", "*.model",
    "*.tiktoken", "config.json", "chat_template*",
]  # fmt: skip


def stage_tokenizer(name: str, revision: str | None) -> dict:
    """Only the tokenizer files of a Hub repo (a script that loads a tokenizer apart from its model)."""
    from huggingface_hub import snapshot_download
    from huggingface_hub.errors import GatedRepoError, RepositoryNotFoundError, RevisionNotFoundError

    try:
        folder = Path(snapshot_download(name, revision=revision, allow_patterns=TOKENIZER_FILES))
    except GatedRepoError:
        raise UserError(f"tokenizer {name} is gated: accept its terms on the Hub, then run with HF_TOKEN set") from None
    except (RepositoryNotFoundError, RevisionNotFoundError) as error:
        raise UserError(f"tokenizer {name}: {str(error).splitlines()[0]}") from None
    files = file_hashes(list(folder.rglob("*")), folder)
    return entry("tokenizer", name, revision=folder.name, files=files, requested_revision=revision or "main")


def stage_metric(name: str) -> dict:
    """An `evaluate` module (evaluate.load("accuracy")): its script lands in HF_HOME/modules, where
    evaluate finds it offline. The script's own imports (scikit-learn for accuracy) must be in the image."""
    import evaluate
    from evaluate.config import HF_MODULES_CACHE

    try:
        module = evaluate.load(name)
    except (FileNotFoundError, ConnectionError):
        raise UserError(
            f"metric {name}: not found on the Hub, or the Hub cannot be reached from here: check the name "
            "(evaluate-metric/NAME or USER/NAME) and run prepare where there is network"
        ) from None
    except ImportError as error:
        raise UserError(
            f"metric {name} needs a package the image lacks ({error}): add it with make image EXTRA=..."
        ) from None
    folder = Path(HF_MODULES_CACHE)
    cached = name.replace("/", "--")  # evaluate_modules/metrics/evaluate-metric--accuracy/<hash>/accuracy.py
    files = file_hashes([p for p in folder.rglob("*") if cached in str(p.relative_to(folder))], folder)
    return entry("metric", name, revision=getattr(module, "hash", None) or "main", files=files)


def stage_dataset(name: str, config: str | None, revision: str | None) -> dict:
    """A Hub dataset, downloaded and prepared as Arrow files that load_dataset reloads offline."""
    import datasets
    from huggingface_hub.errors import GatedRepoError

    try:
        loaded = datasets.load_dataset(name, config, revision=revision)
    except GatedRepoError:
        raise UserError(f"dataset {name} is gated: accept its terms on the Hub, then run with HF_TOKEN set") from None
    except (FileNotFoundError, ValueError) as error:
        raise UserError(f"dataset {name}: {str(error).splitlines()[0]}") from None
    cache_files = [Path(f["filename"]) for split in loaded.values() for f in split.cache_files]
    root = Path(os.path.commonpath([p.parent for p in cache_files])) if cache_files else Path(".")
    return entry(
        "dataset",
        name,
        revision=revision or "main",
        files=file_hashes(cache_files, root),
        config=config or "default",
        arrow_folder=str(root),
    )


def stage(
    model: str | None,
    dataset: str | None,
    revision: str | None = None,
    dataset_config: str | None = None,
    dataset_revision: str | None = None,
    tokenizers: tuple[str, ...] = (),
    metrics: tuple[str, ...] = (),
) -> Path:
    """Stage what was named into the current HF_HOME; return the manifest path."""
    check_online(os.environ)
    from huggingface_hub.constants import HF_HOME

    home = Path(HF_HOME)
    manifest = home / MANIFEST_NAME
    if model:
        manifest = update_manifest(home, stage_model(model, revision))
        print(f"prepare: model {model} staged in {HF_HOME}")
    for tokenizer in tokenizers:
        manifest = update_manifest(home, stage_tokenizer(tokenizer, None))
        print(f"prepare: tokenizer {tokenizer} staged in {HF_HOME}")
    if dataset:
        manifest = update_manifest(home, stage_dataset(dataset, dataset_config, dataset_revision))
        print(f"prepare: dataset {dataset} staged in {HF_HOME}")
    for metric in metrics:
        manifest = update_manifest(home, stage_metric(metric))
        print(f"prepare: metric {metric} staged in {HF_HOME}")
    return manifest
