"""`generate`: sample text from a trained model folder, or a LoRA adapter folder on its base; write jsonl.

Prompts come from `--prompt` (repeatable), `--prompts-file` (one per line), `--jsonl` rows or a `--dataset`
(the `prompt` field, or `--template "Question: {question}\\nAnswer:"` filled from each row), each row out with
its own fields, its id (`row`), `prompt`, `text` and `completion`. Under `launch` the ranks share the rows
(data parallel), or share a model (`--tp-size`); `--device-map` spreads a model too large for one device.
An `--output` is written as rows finish and `--resume` continues an interrupted run. A row past the model's
context is fitted to it (`--truncate left`) or refused before the model loads (`--truncate error`).

Modules: options (the flags), sources and prompts (the rows), context (the rows against the model's
context), loading (the model, placed), ranks (who does which rows), engine (one batch), writing (the
output), report (throughput), cli (the run).
"""

from zerokit.generate.cli import main
from zerokit.generate.engine import generate
from zerokit.generate.options import build_parser

__all__ = ["build_parser", "generate", "main"]
