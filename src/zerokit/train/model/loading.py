"""The tokenizer and the model of a run: loaded, built from a config, or wrapped for fine-tuning."""

from __future__ import annotations

import os
from pathlib import Path

from zerokit.foundations.errors import UserError
from zerokit.sources.data import check_tokenizer
from zerokit.sources.model_source import from_pretrained_checked
from zerokit.train.options import TrainFlags


def load_tokenizer(options: TrainFlags):
    from transformers import AutoTokenizer

    if options.embedded or (options.model_type and not options.tokenizer):
        from zerokit.sources.embedded import prepare_embedded

        _, folder = prepare_embedded(embedded_cache_dir())
        return AutoTokenizer.from_pretrained(folder)
    name = options.tokenizer or options.model
    tokenizer = AutoTokenizer.from_pretrained(name)
    check_tokenizer(tokenizer, name)
    return tokenizer


def model_config(options: TrainFlags, tokenizer):
    """The config of the model to train: --model's, or a fresh one (embedded, --model-type, --from-scratch) fitted
    to the tokenizer with --config-overrides applied; read before the model is built, so its shape can be checked."""
    from transformers import CONFIG_MAPPING, AutoConfig

    from zerokit.train.model.switches import set_dropout

    if options.model and not options.from_scratch:
        if options.config_overrides:
            raise UserError("--config-overrides only applies when training from scratch: add --from-scratch")
        config = AutoConfig.from_pretrained(options.model)
        set_dropout(config, options.dropout)
        return config
    if options.model:
        config = AutoConfig.from_pretrained(options.model)
    elif options.model_type:
        if options.model_type not in CONFIG_MAPPING:
            raise UserError(f"unknown --model-type {options.model_type!r}; e.g. gpt2, llama, mistral, qwen2")
        config = CONFIG_MAPPING[options.model_type]()
    else:
        from zerokit.sources.embedded import model_config as embedded_config

        config = embedded_config()
    fit_to_tokenizer(config, tokenizer)
    if options.config_overrides:
        try:
            config.update_from_string(options.config_overrides)
        except ValueError as error:
            raise UserError(
                f"--config-overrides {options.config_overrides!r}: {error}; "
                'format: "key=value,key=value" with keys of the model config'
            ) from None
    set_dropout(config, options.dropout)
    return config


def load_model(options: TrainFlags, config):
    """from_pretrained for --model (with model_config's config); else random weights from config; with the
    speed switches' attention kernel and loss (zerokit.train.model.switches).

    Weights load in fp32 whatever dtype the folder was saved in: transformers 5 loads a folder in its saved dtype
    by default, so a bf16 folder trained with bf16 weights and optimizer states where the run's precision (its
    record's, fp32 or DeepSpeed's bf16 over fp32 master weights) said otherwise."""
    import torch
    from transformers import AutoModelForCausalLM

    from zerokit.train.model.fused_loss import use_fused_loss
    from zerokit.train.model.switches import model_kwargs

    kwargs = model_kwargs(options)
    try:
        if options.model and not options.from_scratch:
            model = from_pretrained_checked(
                f"--model {options.model}",
                lambda: AutoModelForCausalLM.from_pretrained(
                    options.model, config=config, dtype=torch.float32, output_loading_info=True, **kwargs
                ),
            )
        else:
            model = AutoModelForCausalLM.from_config(config, **kwargs)
    except ValueError as error:
        if not kwargs or "attn" not in str(error).lower():
            raise
        first = str(error).strip().splitlines()[0]
        raise UserError(f"--attn-implementation {options.attn_implementation}: {first}") from None
    use_fused_loss(model, options.cross_entropy)
    return model


def fit_to_tokenizer(config, tokenizer):
    """A from-scratch config's vocabulary size and special tokens, from the tokenizer it trains with."""
    config.vocab_size = len(tokenizer)
    config.bos_token_id = config.eos_token_id = tokenizer.eos_token_id
    config.pad_token_id = tokenizer.pad_token_id
    return config


def fine_tuning(options: TrainFlags, model, args):
    """--lora wraps the model in adapters; --train-last-layers freezes the rest; else unchanged."""
    from zerokit.train.model.lora import apply_lora, count_parameters, parse_lora, train_last_layers

    if options.lora is not None:
        model = apply_lora(model, parse_lora(options.lora))
    elif options.train_last_layers:
        train_last_layers(model, options.train_last_layers)
    else:
        return model
    trainable, total = count_parameters(model)
    if args.process_index == 0:
        print(f"zerokit: training {trainable:,} of {total:,} parameters ({100 * trainable / total:.2f}%)", flush=True)
    return model


def position_limit(config) -> int | None:
    """The most positions the model embeds (GPT-2's n_positions is its max_position_embeddings), or None where
    its config names none."""
    limit = getattr(config, "max_position_embeddings", None) or getattr(config, "n_positions", None)
    return limit if isinstance(limit, int) else None


def check_block_size(block_size: int, config, said: str, fix: str) -> None:
    """Blocks of block_size tokens fit the model's positions; else one line, `said` naming the blocks ("--block-size
    N is") and `fix` ("{limit}" is the model's positions) how to mend it."""
    limit = position_limit(config)
    if limit is not None and block_size > limit:
        raise UserError(
            f"{said} past the model's {limit} positions (max_position_embeddings in its config): "
            + fix.format(limit=limit)
        )


def check_limits(options: TrainFlags, tokenizer, config, prepared: dict | None) -> None:
    """What the config is enough to refuse before the weights load, each in one line: blocks past the model's
    positions (--block-size, or the blocks `prepare tokenize` wrote), or a tokenizer with more tokens than the
    model embeds (its ids would index past the embedding). A fresh config is fitted to its tokenizer, so there
    only --config-overrides can make the embedding smaller. prepared: the --dataset's prepared_info, if any."""
    if options.block_size:
        said = f"--block-size {options.block_size} is"
        check_block_size(options.block_size, config, said, "give --block-size {limit} or less")
    elif prepared:
        said = f"the {prepared['block_size']}-token blocks of --dataset {options.dataset} are"
        check_block_size(prepared["block_size"], config, said, "run `prepare tokenize` again with --block-size {limit}")
    vocab = getattr(config, "vocab_size", None)
    if isinstance(vocab, int) and len(tokenizer) > vocab:
        fix = (
            "use the model's own tokenizer (drop --tokenizer), or --from-scratch to fit a new embedding to it"
            if options.model and not options.from_scratch
            else "drop vocab_size from --config-overrides"
        )
        raise UserError(
            f"the tokenizer has {len(tokenizer)} tokens, more than the {vocab} the model embeds (vocab_size): {fix}"
        )


def pick_block_size(options: TrainFlags, tokenizer, model, wanted: int | None = None) -> int:
    """The block size: `wanted` (the prepared blocks') or --block-size, within the model's positions; else the
    model's maximum, the tokenizer's and 1024, whichever is least."""
    wanted = wanted or options.block_size
    if wanted:
        check_block_size(wanted, model.config, f"block size {wanted} is", "give --block-size {limit} or less")
        return wanted
    return min(position_limit(model.config) or 1024, tokenizer.model_max_length, 1024)


def embedded_cache_dir() -> Path:
    """Where the embedded corpus and tokenizer are made: `$ZEROKIT_CACHE`, else ~/.cache/zerokit."""
    return Path(os.environ.get("ZEROKIT_CACHE", Path.home() / ".cache" / "zerokit")) / "embedded"
