"""Output folders: a command writes only what it owns, and never replaces a finished result unasked.

`train` and `bench` keep a record in the folder they write (RECORD_NAME): the entries that were
there before they first wrote into it (the user's, never touched), whether the run finished, and
at the end the entries it wrote. `--overwrite` removes only what an earlier run wrote, so a
user's notes or corpus in the same folder survive, and an earlier run's checkpoints cannot be
mistaken for this run's (by rotation or by `--resume auto`).
"""

from __future__ import annotations

import fcntl
import json
import os
import shutil
import socket
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TextIO

from zerokit.foundations.errors import UserError
from zerokit.foundations.files import write_json

RECORD_NAME = ".zerokit-output.json"
LOCK_NAME = ".zerokit-output.lock"
RUNNING, FINISHED = "running", "finished"


@dataclass
class OutputRecord:
    command: str
    status: str = RUNNING
    foreign: list[str] = field(default_factory=list)  # entries that were there before the command wrote
    owned: list[str] = field(default_factory=list)  # entries it wrote (set when it finishes)

    @property
    def finished(self) -> bool:
        return self.status == FINISHED


def read_record(folder: Path) -> OutputRecord | None:
    path = folder / RECORD_NAME
    if not path.is_file():
        return None
    try:
        data = json.loads(path.read_text())
        return OutputRecord(**data)
    except (ValueError, TypeError) as error:
        raise UserError(f"{path} is damaged ({error}): remove it, then run again with --overwrite") from None


def write_record(folder: Path, record: OutputRecord) -> None:
    """Atomically: a crash leaves the old record or the new one, never half of one."""
    write_json(folder / RECORD_NAME, asdict(record), sort_keys=False)


def entries(folder: Path) -> set[str]:
    return {p.name for p in folder.iterdir()} - {RECORD_NAME, LOCK_NAME} if folder.is_dir() else set()


def written_by_earlier_run(folder: Path, record: OutputRecord | None) -> set[str]:
    """What an earlier run wrote: its list when it finished, else everything but the foreign entries."""
    if record is None:
        return set()
    present = entries(folder)
    return present & set(record.owned) if record.finished else present - set(record.foreign)


_held_locks: list[TextIO] = []  # open for the life of the process: closing one would release it


def hold_lock(folder: Path, command: str) -> None:
    """An exclusive lock on folder, held while this process lives: a second run into the same folder
    (a job submitted twice, or ranks that each started alone because a container hid the job's
    variables from them) fails at once instead of writing over this one. flock: the kernel drops
    it when the process ends, however it ends, so a requeued job never finds a stale lock."""
    folder.mkdir(parents=True, exist_ok=True)
    handle = (folder / LOCK_NAME).open("a+")
    try:
        fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        handle.seek(0)
        holder = handle.read().strip() or "another process"
        handle.close()
        raise UserError(
            f"output folder {folder} is being written by another run ({holder}): wait for it or pick another "
            "output folder; if this is one of a job's ranks, each started alone (e.g. `srun ... apptainer exec "
            "--cleanenv`), pass the scheduler's variables into the container"
        ) from None
    handle.seek(0)
    handle.truncate()
    handle.write(f"{command}, pid {os.getpid()} on {socket.gethostname()}\n")
    handle.flush()
    _held_locks.append(handle)


def begin(folder: Path, command: str, *, replace: bool) -> OutputRecord:
    """Claim folder for a run of command; with replace, first remove what an earlier run wrote.

    A folder already claimed and not replaced (a resumed run) keeps its record: the entries
    that were foreign stay foreign for the whole chain of resumed runs.
    """
    folder.mkdir(parents=True, exist_ok=True)
    record = read_record(folder)
    if replace:
        for name in written_by_earlier_run(folder, record):
            remove(folder / name)
        foreign = sorted(entries(folder)) if record is None else [n for n in record.foreign if (folder / n).exists()]
        record = OutputRecord(command=command, foreign=foreign)
    elif record is None:
        record = OutputRecord(command=command, foreign=sorted(entries(folder)))
    else:
        record.status, record.owned = RUNNING, []
    write_record(folder, record)
    return record


def finish(folder: Path, record: OutputRecord) -> None:
    record.owned = sorted(entries(folder) - set(record.foreign))
    record.status = FINISHED
    write_record(folder, record)


def foreign_entries(folder: Path) -> set[str]:
    record = read_record(folder)
    return set(record.foreign) if record else set()


def remove(path: Path) -> None:
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path)
    else:
        path.unlink(missing_ok=True)


def existing_parent(path: Path) -> Path:
    """path, or its nearest parent that exists (what a new folder's free space and permissions are)."""
    while not path.exists() and path != path.parent:
        path = path.parent
    return path


def check_writable(folder: Path, flag: str) -> None:
    """The folder, or the nearest parent that exists, must be writable: found now, not after training."""
    existing = existing_parent(folder)
    if not existing.is_dir():
        raise UserError(f"{flag} {folder}: {existing} is a file, not a folder: pick another {flag}")
    if not os.access(existing, os.W_OK | os.X_OK):
        why = "a read-only file system" if _read_only(existing) else "no write permission"
        raise UserError(f"{flag} {folder}: {existing} is not writable ({why}): pick another {flag}")


def _read_only(path: Path) -> bool:
    return bool(os.statvfs(path).f_flag & os.ST_RDONLY)
