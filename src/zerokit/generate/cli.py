"""`generate`'s run, in the order that fails soonest: flags, rows (a template's missing field), the model
folder, the output (busy, or not this run's rows), the tokenizer (no chat template), the rows against the
model's context (its config); only then the model loads, and the rows left are generated batch by batch,
each written as it finishes."""

from __future__ import annotations

import os
import signal
import sys
import time
from pathlib import Path

from zerokit.foundations.errors import UserError
from zerokit.generate.context import fit_to_model
from zerokit.generate.engine import BatchResult, Sampling, run_batch
from zerokit.generate.loading import Placement, config_source, input_device, load_model, model_to_load
from zerokit.generate.options import GenerateFlags, parse
from zerokit.generate.prompts import Row, chat_prompts, read_rows, unanswered_line
from zerokit.generate.ranks import Ranks, alike_on_every_rank, start
from zerokit.generate.report import Report, peak_memory
from zerokit.generate.writing import ERROR, ROW_ID, FileRows, StdoutRows
from zerokit.sources.model_source import is_path, require_model_folder, require_tokenizer_folder


def main(argv: list[str]) -> int:
    # A scheduler's warning, passed on by launch: each batch is on disk as it ends, so there is nothing to save
    # (or to die of). A no-op handler, not SIG_IGN: an ignored signal stays ignored in every process started
    # after it (an in-process caller's launch would then drop Slurm's warning), and the handler is put back.
    warnings = (signal.SIGUSR1, signal.SIGUSR2)
    previous = {warning: signal.signal(warning, lambda signum, frame: None) for warning in warnings}
    try:
        return run(argv)
    finally:
        for warning, handler in previous.items():
            signal.signal(warning, handler)


def run(argv: list[str]) -> int:
    with alike_on_every_rank():
        options = parse(argv)
        rows = read_rows(options)
        model = options.model
        if is_path(model):
            model = str(model_to_load(Path(model).expanduser()))
            require_model_folder("model", model)
            require_tokenizer_folder("model", model)
        check_device_map(options)
        ranks = start(options.tp_size)
    sink: list[FileRows | StdoutRows] = []  # rank 0's, the one writer

    def open_output() -> list[int]:
        output = options.output
        sink.append(FileRows(output, resume=options.resume, overwrite=options.overwrite) if output else StdoutRows())
        answered = {index: row for index, row in sink[0].done.items() if ERROR not in row}  # the others: again
        check_done(answered, rows, sink[0].where)
        return sorted(answered)

    done = set(ranks.agree(open_output))
    unanswered = [row for row in rows if row.index not in done and row.error]
    pending = [row for row in rows if row.index not in done and not row.error]
    if ranks.writer and unanswered:
        sink[0].write([{ROW_ID: row.index, "prompt": row.prompt, ERROR: row.error} for row in unanswered])
        print(f"generate: warning: {unanswered_line(unanswered)}", file=sys.stderr)
    report = Report(ranks.world_size, options.tp_size, resumed_rows=len(done))
    if pending:
        generate_rows(options, model, pending, ranks, sink, report)
    memory = ranks.gather(peak_memory(), every_rank=True)
    if ranks.writer:
        sink[0].finish()
        report.memory = memory
        report.say(sink[0].where)
        if options.report:
            report.write(options.report)
    return 0


def generate_rows(
    options: GenerateFlags, model: str, pending: list[Row], ranks: Ranks, sink: list, report: Report
) -> None:
    """Load the tokenizer and model, then generate this rank's share of the pending rows; rank 0 writes every
    step's rows as the step ends."""
    from transformers import AutoTokenizer

    from zerokit.launch.rank.progress import heartbeat

    tokenizer = AutoTokenizer.from_pretrained(model)
    tokenizer.padding_side = "left"
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    chats = (lambda rows: chat_prompts(rows, tokenizer, model)) if options.chat else None
    with alike_on_every_rank():  # both refused before the model loads: no chat template, a row past the context
        if chats:
            chats(pending[:1])
        source = config_source(model, options.base)
        pending, context = fit_to_model(pending, tokenizer, source, chats, options.truncate, say=ranks.writer)
    placement = Placement.of(options)
    started = time.perf_counter()
    loaded = load_model(model, options.base, placement, ranks.tp_group)
    device = input_device(loaded, placement)
    sampling = Sampling(options.temperature, options.top_p, options.seed, tuple(options.stop))
    report.load_seconds = time.perf_counter() - started
    started = time.perf_counter()
    for batch in ranks.steps(pending, options.batch_size):
        texts = chats(batch) if chats and batch else None
        result = run_batch(loaded, tokenizer, batch, sampling, device, texts, context) if batch else BatchResult()
        heartbeat()
        step = ranks.gather(result)
        if ranks.writer:
            finished = sorted((row for part in step for row in part.rows), key=lambda row: row[ROW_ID])
            sink[0].write(finished)
            report.rows += len(finished)
            report.generated_tokens += sum(part.tokens for part in step)
            report.first_token_seconds += [part.first_token_s for part in step if part.first_token_s is not None]
    report.generate_seconds = time.perf_counter() - started


def check_done(done: dict[int, dict], rows: list[Row], where: str) -> None:
    """Rows kept from an earlier run must be this run's: the same ids, made from the same prompts."""
    prompts = {row.index: row.prompt for row in rows}
    for index, row in done.items():
        if prompts.get(index) != row.get("prompt"):
            raise UserError(
                f"{where} holds row {index} made from another prompt than this run's (other rows, template or "
                "--sample): pass the same inputs to resume it, or --overwrite"
            )


def check_device_map(options: GenerateFlags) -> None:
    """--device-map spreads one model over the node's GPUs: two ranks on a node would each take them all."""
    if not options.device_map or int(os.environ.get("LOCAL_WORLD_SIZE", "1")) < 2:
        return
    import torch

    if torch.cuda.is_available():
        raise UserError(
            "--device-map spreads one model over every GPU of the node: run one rank per node "
            "(launch --nproc-per-node 1), or --tp-size to split a model over ranks"
        )
