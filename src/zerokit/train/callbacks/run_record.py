"""zerokit-run.json: what a `train` run ran on, in its output folder and in each of its checkpoints.

RunRecorder is a TrainerCallback. Rank 0 makes the record when the Trainer is built and adds the config DeepSpeed
started with (the config HF resolved, no "auto" left). It writes it (atomically: a crash leaves the old one or the
new one) into the output folder once the run has started (its first step has ended), into each checkpoint it saves
(listed in the checkpoint's zerokit-checkpoint.json, so the damage check covers it), and at the end with the end
time. Until the run has started the folder keeps the last run's record, and the folder's ownership record too
(zerokit.outputs.ownership.started, written then): a run that fails before its first step, as a resume whose
checkpoint does not load, leaves the folder as it was. The last run's record is not lost when this one replaces it:
its essentials head "earlier_runs", the folder's history of runs. A resumed run's record names the chain of
checkpoints it came from: the checkpoint it resumed, then that checkpoint's own chain. Its "batch" (micro,
accumulation, data-parallel ranks, global) is what a resume on another number of ranks keeps. A run that
`launch --max-restarts` restarted after a machine fault lists the faults and restarts of that launch so far
("restarts": when, node, rank, cause, exit status, restart number, the checkpoint resumed from), read from the
log launch names to it (zerokit.foundations.restart_log), with what each fault cost: the steps lost and the
seconds to the first step after it (zerokit.train.callbacks.fault_cost). At the end it adds what each checkpoint cost
("checkpoint_saves", zerokit.train.checkpoints.writer.SaveLog): the stall it put on training, in seconds and in
median steps (timed here, between step ends, leaving out those that held a save or an evaluation), the wait for
the save before it, and the write's time and speed. A checkpoint written in the background is not yet published
when its callbacks run: its record goes into its staging folder, and is published with it.

The file is written after the output folder is claimed (zerokit.outputs.ownership), so the folder's record
counts it as this run's: `--overwrite` removes it with the rest of the run's files (and so starts a new history).
"""

from __future__ import annotations

import base64
import binascii
import json
import os
import statistics
import sys
import time
from collections.abc import Mapping
from datetime import UTC, datetime
from pathlib import Path

from transformers import TrainerCallback

from zerokit.foundations.files import write_json
from zerokit.foundations.restart_log import inherited_events
from zerokit.image.provenance import (
    FORMAT,
    RECORD_NAME,
    auto_leaves,
    environment_facts,
    jsonable,
    launcher_facts,
    leaves,
    now,
    redacted_argv,
    start_environment,
)
from zerokit.outputs import ownership
from zerokit.outputs.checkpoints import PREFIX, SIZES_NAME, STAGING_PREFIX, checkpoint_step
from zerokit.train.callbacks.fault_cost import ProgressNote, read_progress, with_first_step, with_lost_steps
from zerokit.train.checkpoints.resume_match import precision
from zerokit.train.checkpoints.writer import SaveLog
from zerokit.train.ds_settings import DeepSpeedSettings
from zerokit.train.options import TrainFlags
from zerokit.train.sizing.global_batch import GlobalBatch

# What "earlier_runs" keeps of each run before: enough to tell them apart and see what changed.
EARLIER_FIELDS = ("started_at", "ended_at", "final_step", "argv", "zerokit", "parallelism", "precision")


def write_record(path: Path, data: dict) -> None:
    write_json(path, jsonable(data), default=str, allow_nan=False)


def read_record(folder: Path) -> dict | None:
    try:
        return json.loads((folder / RECORD_NAME).read_text())
    except (OSError, ValueError):
        return None


def resume_chain(checkpoint: Path | None) -> list[dict]:
    """The checkpoint resumed from, then the ones its run resumed from (its record's chain)."""
    if checkpoint is None:
        return []
    parent = read_record(checkpoint)
    link = {"checkpoint": str(checkpoint.resolve()), "step": checkpoint_step(checkpoint)}
    if parent is None:
        return [{**link, "record": None}]  # written by an older zerokit, or by the Trainer alone
    link.update(run_started_at=parent.get("started_at"), commit=(parent.get("zerokit") or {}).get("commit"))
    return [link, *parent.get("resumed_from", [])]


def earlier_runs(last: dict) -> list[dict]:
    """The output folder's runs before this one, newest first: the last run's essentials, then its own history."""
    if not last:
        return []
    return [{name: last.get(name) for name in EARLIER_FIELDS}, *last.get("earlier_runs", [])]


def given_config(deepspeed_arg: str) -> dict | None:
    """zerokit's base64 JSON of a changed copy of the config, as handed to HF (None: not that form). It is read, never
    opened as a file name: it is often longer than a file name may be."""
    try:
        return json.loads(base64.urlsafe_b64decode(deepspeed_arg))
    except (binascii.Error, ValueError):
        return None


def deepspeed_section(name: str | None, settings: DeepSpeedSettings | None, deepspeed_arg: str | None) -> dict | None:
    """Which config (name as given, file), what zerokit changed in it for this run; `resolved` comes later.
    deepspeed_arg: the config as handed to HF, the file's path or a changed copy (options.ds_config_argument)."""
    if settings is None:
        return None
    file_config = settings.as_dict()
    given = None
    if deepspeed_arg and deepspeed_arg != str(settings.path):  # a changed copy, not the file itself
        given = given_config(deepspeed_arg)
    given = given or settings.as_dict()
    file_leaves = leaves(file_config)
    changes = {k: v for k, v in leaves(given).items() if file_leaves.get(k, object()) != v}
    return {
        "name": name,
        "file": str(settings.path),
        "given": given,  # as handed to HF: the file with zerokit's changes, "auto" values in
        "zerokit_changes": changes,
        "resolved": None,  # as DeepSpeed got it (on_train_begin)
        "still_auto": None,
    }


class RunRecorder(TrainerCallback):
    """Writes zerokit-run.json (see the module docstring); only rank 0 writes."""

    def __init__(
        self,
        options: TrainFlags,
        *,
        resume: Path | None,
        rank: int,
        layout: Mapping[str, int] | None = None,
        environ: Mapping[str, str] | None = None,
        claim: ownership.OutputRecord | None = None,
        saves: SaveLog | None = None,
        micro_batch: Mapping[str, object] | None = None,
        memory_recovery: Mapping[str, object] | None = None,
        memory_every: int | None = None,
    ) -> None:
        """options: the run's (its output folder, its DeepSpeed config by name and file). layout: how the ranks
        divide ({"tp_size": ..., "dp_size": ...}), recorded as "parallelism" and, with the batch flags, as the
        global batch ("batch"). claim: the output folder's ownership record (rank 0's), written when the run has
        started. saves: what each checkpoint cost (the Trainer fills it), recorded at the end. micro_batch: what
        --micro-batch auto chose and how, recorded as "micro_batch" (None without it). memory_recovery: what a
        restart of a --memory-checkpoints run resumed, from memory or disk
        (zerokit.train.checkpoints.node_copies.recovery); memory_every: its K, whose copies are noted as saves are (a
        restart's count of the steps lost)."""
        self.output_dir = options.output_dir
        self.claim = claim
        self.layout = dict(layout or {})
        self.rank = rank
        self.environ = start_environment(environ)
        self.record: dict = {}
        self._start = (options.config, options.ds_settings, resume)
        self.progress = ProgressNote(self.output_dir)
        self.stepped = False  # this run's first step has ended
        self.started = False  # the output folder's records are this run's
        self.saves = saves
        self.micro_batch = micro_batch  # what --micro-batch auto chose, and how (zerokit.train.sizing.micro_probe)
        self.memory_recovery = memory_recovery
        self.memory_every = memory_every
        self.step_seconds: list[float] = []  # between step ends, but those that held a save or an evaluation
        self._step_end: float | None = None

    def on_init_end(self, args, state, control, **kwargs):
        if self.rank == 0:
            config_name, settings, resume = self._start
            last = read_record(self.output_dir) or {}  # the last run's, kept until this one has started
            before = last.get("restarts") or []  # the stopped run's
            restarts = with_lost_steps(
                inherited_events(self.environ),
                before,
                read_progress(self.output_dir),
                resume and checkpoint_step(resume),
            )
            self.record = {
                "format": FORMAT,
                "command": "train",
                "argv": redacted_argv(sys.argv),
                "cwd": os.getcwd(),
                "started_at": now(),
                "ended_at": None,
                **environment_facts(self.environ),
                "launcher": launcher_facts(self.environ),
                "parallelism": self.layout or None,
                "batch": self.batch(args),
                "micro_batch": self.micro_batch,
                "precision": precision(args),
                "deepspeed": deepspeed_section(config_name, settings, args.deepspeed),
                "resumed_from": resume_chain(resume),
                "restarts": restarts,
                "memory_recovery": self.memory_recovery,
                "earlier_runs": earlier_runs(last),
            }
        return control

    def batch(self, args) -> dict[str, int] | None:
        """The global batch and its parts: a resume on another number of ranks keeps it
        (zerokit.train.sizing.global_batch)."""
        if "dp_size" not in self.layout:
            return None
        micro, accumulation = args.per_device_train_batch_size, args.gradient_accumulation_steps
        return GlobalBatch(micro, accumulation, self.layout["dp_size"]).as_record()

    def on_train_begin(self, args, state, control, **kwargs):
        """DeepSpeed has started: the config it got is HF's, every "auto" filled in."""
        hf_config = getattr(args, "hf_deepspeed_config", None)
        if self.rank == 0 and self.record.get("deepspeed") and hf_config is not None:
            from zerokit.launch.rank.quiet_ops import loaded_ops

            resolved = jsonable(json.loads(json.dumps(hf_config.config, default=str)))
            still_auto = auto_leaves(resolved)
            self.record["deepspeed"].update(resolved=resolved, still_auto=still_auto, ops_loaded=loaded_ops())
        return control

    def on_step_end(self, args, state, control, **kwargs):
        """The step reached, noted (for a restart's count of the steps lost); at the first, the run has started: its
        records written, with the seconds to it after a fault."""
        now_ = time.monotonic()
        if self._step_end is not None:
            self.step_seconds.append(now_ - self._step_end)
        self._step_end = now_
        if self.rank == 0 and self.record:
            if not self.stepped:
                self.stepped = True
                with_first_step(self.record["restarts"], datetime.now(UTC))
                self.write()
            copied = bool(self.memory_every) and state.global_step % self.memory_every == 0
            self.progress.step(state.global_step, saved=copied)
        return control

    def on_evaluate(self, args, state, control, **kwargs):
        self._step_end = None  # the next step's time holds the evaluation: not timed
        return control

    def on_save(self, args, state, control, **kwargs):
        self._step_end = None
        name = f"{PREFIX}-{state.global_step}"
        checkpoint = Path(args.output_dir) / name
        staging = Path(args.output_dir) / f"{STAGING_PREFIX}{name}" / name  # being written in the background
        if self.rank == 0:
            self.progress.step(state.global_step, saved=True)
        record = {**self.record, "checkpoint": {"step": state.global_step, "saved_at": now()}}
        if self.rank == 0 and checkpoint.is_dir():
            write_record(checkpoint / RECORD_NAME, record)
            add_to_sizes(checkpoint, RECORD_NAME)
        elif self.rank == 0 and staging.is_dir():
            write_record(staging / RECORD_NAME, record)  # published with it, its size recorded then
        return control

    def on_train_end(self, args, state, control, **kwargs):
        if self.rank == 0 and self.record:
            self.record.update(ended_at=now(), final_step=state.global_step)
            if self.saves is not None and self.saves.saves:
                median = statistics.median(self.step_seconds) if self.step_seconds else None
                self.record["checkpoint_saves"] = self.saves.summary(median)
            self.write()
        return control

    def write(self) -> None:
        """The record into the output folder; the first time, the folder's ownership record too: from now on the
        folder's records are this run's."""
        if not self.started and self.claim is not None:
            ownership.started(self.output_dir, self.claim)
        self.started = True
        write_record(self.output_dir / RECORD_NAME, self.record)


def add_to_sizes(checkpoint: Path, name: str) -> None:
    """List a file added after publishing in the checkpoint's size record (zerokit.outputs.checkpoints.damage)."""
    sizes_path = checkpoint / SIZES_NAME
    if not sizes_path.is_file():
        return
    sizes = json.loads(sizes_path.read_text())
    sizes[name] = (checkpoint / name).stat().st_size
    write_json(sizes_path, sizes, indent=1, sort_keys=False)
