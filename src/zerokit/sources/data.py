"""Datasets for causal-LM training: find the source, load it, tokenize, group into blocks (as run_clm does)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from itertools import chain
from pathlib import Path

from zerokit.foundations.errors import UserError

TEXT_SUFFIXES = {".txt": "text", ".text": "text", ".jsonl": "json", ".json": "json", ".csv": "csv"}
PREPARED_NAME = "zerokit-prepared.json"  # marks a folder written by `prepare tokenize`
SOURCE_HELP = "a .txt/.jsonl/.csv file, a folder of such files, a save_to_disk folder, or a Hub dataset name"


@dataclass(frozen=True)
class DatasetSource:
    """Where the text comes from: a loader name and its files, a save_to_disk folder, or a Hub name."""

    kind: str  # "files", "disk", "prepared" (written by `prepare tokenize`) or "hub"
    location: str
    loader: str = ""
    data_files: tuple[str, ...] = ()


def looks_like_path(name: str) -> bool:
    return name.startswith(("/", "./", "../", "~")) or Path(name).suffix in TEXT_SUFFIXES or Path(name).exists()


def resolve_source(name: str) -> DatasetSource:
    """Decide how to load `--dataset NAME`; a path that does not exist is an error, not a Hub lookup."""
    if not looks_like_path(name):
        return DatasetSource(kind="hub", location=name)
    path = Path(name).expanduser()
    if not path.exists():
        raise UserError(f"dataset not found: {path} (give {SOURCE_HELP})")
    if path.is_file():
        loader = TEXT_SUFFIXES.get(path.suffix)
        if loader is None:
            raise UserError(f"dataset {path}: unknown file type {path.suffix!r} (give {SOURCE_HELP})")
        return DatasetSource(kind="files", location=str(path), loader=loader, data_files=(str(path),))
    if (path / PREPARED_NAME).is_file():
        return DatasetSource(kind="prepared", location=str(path))
    if (path / "dataset_dict.json").is_file() or (path / "dataset_info.json").is_file():
        return DatasetSource(kind="disk", location=str(path))
    return folder_source(path)


def folder_source(path: Path) -> DatasetSource:
    """A folder of data files of one kind (shards: .txt, .jsonl, .csv ...), read as one dataset. Files of
    several kinds are refused: reading one kind would leave the others out without a word."""
    kinds: dict[str, list[str]] = {}
    for file in sorted(path.rglob("*")):
        if file.is_file() and file.suffix in TEXT_SUFFIXES and not file.name.startswith("."):
            kinds.setdefault(TEXT_SUFFIXES[file.suffix], []).append(str(file))
    if not kinds:
        what = "holds no data files, nor is it a save_to_disk folder"
        raise UserError(f"dataset folder {path} {what}: give {SOURCE_HELP}")
    if len(kinds) > 1:
        counts = ", ".join(f"{len(files)} {loader}" for loader, files in kinds.items())
        raise UserError(
            f"dataset folder {path} holds files of several kinds ({counts}): give a folder of one kind, or one file"
        )
    ((loader, files),) = kinds.items()
    return DatasetSource(kind="files", location=str(path), loader=loader, data_files=tuple(files))


def read_prepared(folder: Path) -> dict | None:
    """The metadata of a folder written by `prepare tokenize` (zerokit.prepare.pack), or None for any other folder."""
    path = folder / PREPARED_NAME
    return json.loads(path.read_text()) if path.is_file() else None


def check_text_files(source: DatasetSource, chunk_bytes: int = 1 << 20) -> None:
    """Local text files must hold text: an empty or binary file, or bytes that are not UTF-8 anywhere in it, fail
    now, in one line naming the line and byte and the fix, not as "num_samples=0" or a decode error in every rank.
    Read whole, a chunk at a time (1.3 s a GB on the 2-core development machine)."""
    if source.kind != "files" or not source.data_files:
        return
    if all(Path(f).stat().st_size == 0 for f in source.data_files):
        raise UserError(f"dataset {source.location} is empty: give a file with text in it")
    has_text = [check_utf8_text(Path(file), chunk_bytes) for file in source.data_files]
    if not any(has_text):
        raise UserError(f"dataset {source.location} holds only blank lines: give a file with text in it")


def check_utf8_text(path: Path, chunk_bytes: int) -> bool:
    """One file: no NUL byte and no byte that is not UTF-8, each named by line and byte. Whether it holds
    anything but white space."""
    import codecs

    from zerokit.foundations.utf8 import bad_byte, iconv_fix

    decoder = codecs.getincrementaldecoder("utf-8")()
    lines, line_start, offset = 0, 0, 0  # newlines before this chunk, the file offset of the current line
    has_text = False
    with open(path, "rb") as handle:
        while chunk := handle.read(chunk_bytes):
            has_text = has_text or bool(chunk.strip())
            if (nul := chunk.find(b"\0")) >= 0:
                raise UserError(
                    f"dataset {path} holds NUL bytes (byte {offset + nul} of the file): it is binary, not text; "
                    "give a text file"
                )
            pending = len(decoder.getstate()[0])  # a character's first bytes, left from the chunk before
            try:
                decoder.decode(chunk)
            except UnicodeDecodeError as error:
                at = max(0, min(len(chunk) - 1, error.start - pending))  # within this chunk
                place = bad_byte(chunk, at)
                column = place.column if b"\n" in chunk[:at] else offset + at - line_start
                raise UserError(
                    f"dataset {path} is not UTF-8 text at line {lines + place.line}, byte {column} (byte "
                    f"{offset + at} of the file: 0x{place.value:02x}): {iconv_fix(path)}"
                ) from None
            lines += chunk.count(b"\n")
            if (last := chunk.rfind(b"\n")) >= 0:
                line_start = offset + last + 1
            offset += len(chunk)
    try:
        decoder.decode(b"", final=True)
    except UnicodeDecodeError:
        raise UserError(f"dataset {path} ends in the middle of a UTF-8 character: {iconv_fix(path)}") from None
    return has_text


def check_blocks(blocks, source: str, block_size: int) -> None:
    """At least one training block (a corpus shorter than one block trains nothing) and, where there is a
    validation split, one validation block: the run evaluates on it at the end, and an empty one ended the run,
    after training, in a KeyError over the missing eval_loss."""
    if len(blocks["train"]) == 0:
        raise UserError(
            f"dataset {source} has fewer tokens than one block of {block_size} after the validation split: "
            "give more text, or a smaller --block-size"
        )
    validation = blocks.get("validation")
    if validation is not None and hasattr(validation, "__len__") and len(validation) == 0:
        raise UserError(
            f"dataset {source}: its validation split holds no whole block of {block_size} tokens, and the run "
            "evaluates on it: give more text, a higher --validation-split-percentage (where the split is taken from "
            "the training text), or a smaller --block-size"
        )


def load_raw(source: DatasetSource, validation_percent: int, seed: int, splits: dict[str, str] | None = None):
    """Load the text as a DatasetDict with "train" and "validation" (split off train if there is none)."""
    import datasets

    if splits:  # explicit split files (the embedded corpus)
        raw = datasets.load_dataset("text", data_files=splits)
    elif source.kind in ("disk", "prepared"):
        raw = datasets.load_from_disk(source.location)
    elif source.kind == "hub":
        raw = datasets.load_dataset(source.location)
    else:
        try:
            raw = datasets.load_dataset(source.loader, data_files={"train": list(source.data_files)})
        except datasets.exceptions.DatasetGenerationError as error:
            cause = error.__cause__ or error
            raise UserError(
                f"dataset {source.location} cannot be read as {source.loader} ({type(cause).__name__}: "
                f"{str(cause).splitlines()[0][:200]}): fix the file, or give it the suffix of its format"
            ) from None
    if isinstance(raw, datasets.Dataset):
        raw = datasets.DatasetDict(train=raw)
    if "validation" not in raw:
        try:
            parts = raw["train"].train_test_split(test_size=validation_percent / 100, seed=seed)
        except ValueError:
            rows = len(raw["train"])
            raise UserError(
                f"dataset {source.location} has {rows} row{'' if rows == 1 else 's'}, too few to hold out "
                f"{validation_percent}% for validation: give more text (or one with a validation split)"
            ) from None
        raw = datasets.DatasetDict(train=parts["train"], validation=parts["test"])
    return raw


def tokenize_and_group(raw, tokenizer, text_column: str, block_size: int, num_proc: int | None = None):
    """Tokenize every line (EOS appended), concatenate, cut into block_size chunks with labels = inputs.

    Tokenizing runs in num_proc processes; grouping (cheap) in one, so the blocks do not depend on
    num_proc: `prepare tokenize` with 8 processes gives the blocks train makes itself.
    """
    columns = check_text_column(raw["train"].column_names, text_column)
    tokenize, group = block_functions(tokenizer, text_column, block_size)
    tokenized = raw.map(tokenize, batched=True, remove_columns=columns, num_proc=num_proc, desc="tokenizing")
    return tokenized.map(group, batched=True, desc=f"grouping into blocks of {block_size}")


def stream_blocks(source: DatasetSource, tokenizer, text_column: str, block_size: int) -> dict:
    """`--streaming`: read, tokenize and group lazily while training, for corpora larger than disk or memory.

    Nothing is written and no eval split is held out: "validation" is None unless the source has one.
    """
    import datasets

    if source.kind in ("disk", "prepared"):
        raise UserError(f"--streaming is for text files and Hub datasets, not {source.location}: drop --streaming")
    if source.kind == "hub":
        raw = datasets.load_dataset(source.location, streaming=True)
    else:
        raw = datasets.load_dataset(source.loader, data_files={"train": list(source.data_files)}, streaming=True)
    tokenize, group = block_functions(tokenizer, text_column, block_size)
    streams = {"validation": None}
    for split in ("train", "validation"):
        if split in raw:
            columns = check_text_column(raw[split].column_names or list(next(iter(raw[split]))), text_column)
            streams[split] = raw[split].map(tokenize, batched=True, remove_columns=columns).map(group, batched=True)
    return streams


def check_text_column(columns: list[str], text_column: str) -> list[str]:
    if text_column not in columns:
        raise UserError(f"dataset has no column {text_column!r}; it has {columns}: pass --text-column NAME")
    return columns


FEWEST_TOKENS = 32  # below this, a "tokenizer" is a placeholder (transformers 5 makes one of a single token)


def check_tokenizer(tokenizer, name: str) -> None:
    """A tokenizer that text can be packed with: more than a handful of tokens, and an end-of-text token, which
    packing puts between documents (zerokit.sources.data.block_functions)."""
    if len(tokenizer) < FEWEST_TOKENS:
        raise UserError(
            f"tokenizer {name} has {len(tokenizer)} tokens: not a trained tokenizer; give the one the model was "
            "trained with (--tokenizer FOLDER), or train one (tokenizers' trainers)"
        )
    if not tokenizer.eos_token:
        raise UserError(
            f"tokenizer {name} has no end-of-text token (eos_token), which packing puts between documents: give a "
            "tokenizer that has one, or set it (tokenizer.eos_token = ...; save_pretrained) before training"
        )


def block_functions(tokenizer, text_column: str, block_size: int):
    """The two batched map functions: tokenize (EOS appended), group into blocks with labels."""

    def tokenize(batch):
        texts = [t + tokenizer.eos_token for t in batch[text_column] if t and t.strip()]
        if not texts:  # a batch of blank lines only (transformers' tokenizers fail on an empty list)
            return {key: [] for key in tokenizer(tokenizer.eos_token)}
        return tokenizer(texts)

    def group(batch):
        joined = {k: list(chain.from_iterable(batch[k])) for k in batch}
        total = (len(joined["input_ids"]) // block_size) * block_size
        blocks = {k: [v[i : i + block_size] for i in range(0, total, block_size)] for k, v in joined.items()}
        blocks["labels"] = [ids.copy() for ids in blocks["input_ids"]]
        return blocks

    return tokenize, group
