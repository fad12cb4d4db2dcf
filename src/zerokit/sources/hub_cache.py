"""What the Hugging Face cache holds, read without the network: a snapshot, and whether a model
folder is complete. Used by doctor's hub check and by train's offline check before ranks start."""

from __future__ import annotations

import json
from pathlib import Path

WEIGHT_FILES = ("model.safetensors", "pytorch_model.bin")
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "vocab.json", "tokenizer.model", "spiece.model")
NOT_DATA = {"README.md", ".gitattributes"}  # files of a dataset repo that hold no data


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
