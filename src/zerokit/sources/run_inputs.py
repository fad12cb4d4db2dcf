"""A run's inputs found before any rank starts: what `--model`, `--tokenizer` and `--dataset` name is there.

A local folder must hold what loading it reads (zerokit.sources.model_source); offline (the default,
zerokit.sources.offline) a Hub name must be in the cache. Each missing input fails now, in one line, naming the
way on (`prepare`, for a Hub name), not in the ranks after start-up.
"""

from __future__ import annotations

from collections.abc import MutableMapping

from zerokit.sources import offline
from zerokit.sources.model_source import is_path, require_model_folder, require_tokenizer_folder, require_weights

# A model folder without a tokenizer: transformers 5 would make one up.
NO_TOKENIZER_FIX = "give --tokenizer FOLDER (the tokenizer the model was trained with), or save it into the folder"


def check_inputs(
    model: str | None,
    tokenizer: str | None,
    dataset: str | None,
    *,
    from_scratch: bool,
    online: bool,
    environ: MutableMapping[str, str],
) -> None:
    """The local folders first (from_scratch: --model's config is read, not its weights); then, unless online,
    offline mode is set in environ (zerokit.sources.offline.go_offline) and, where it holds, the Hub names are
    looked up in the cache."""
    if model and is_path(model):
        require_model_folder("--model", model)
        if not from_scratch:
            require_weights("--model", model)
        if not tokenizer:  # the tokenizer is the model folder's
            require_tokenizer_folder("--model", model, NO_TOKENIZER_FIX)
    if tokenizer and is_path(tokenizer):
        require_tokenizer_folder("--tokenizer", tokenizer)
    if online:
        return
    offline.go_offline(environ)
    if not offline.is_offline(environ):
        return
    if model:
        offline.require_cached_model(model)
    if tokenizer:
        offline.require_cached_tokenizer(tokenizer)
    if dataset:
        from zerokit.sources.data import resolve_source

        if resolve_source(dataset).kind == "hub":
            offline.require_cached_dataset(dataset)
