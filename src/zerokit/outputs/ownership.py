"""Output folders: a command writes only what it owns, and never replaces a finished result unasked.

`train` and `bench` keep a record in the folder they write (RECORD_NAME): the entries that were
there before they first wrote into it (the user's, never touched), whether the run finished, and
at the end the entries it wrote. `--overwrite` removes only what an earlier run wrote, so a
user's notes or corpus in the same folder survive, and an earlier run's checkpoints cannot be
mistaken for this run's (by rotation or by `--resume auto`).
"""

from __future__ import annotations

import atexit
import errno
import fcntl
import json
import os
import shutil
import socket
from collections.abc import Iterator
from contextlib import contextmanager
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
# Locks this process holds on outputs it has not claimed yet (a folder that begin has not claimed, a file that
# release_beside has not released), by lock file: the lock file if it made it (None: it was there) and the folders it
# made, innermost first; taken away when the process ends with them unclaimed.
_unclaimed: dict[Path, tuple[Path | None, list[Path]]] = {}


class OutputBusy(UserError):
    """Another process writes the same output now."""


def take_lock(path: Path, command: str, output: Path) -> TextIO:
    """An exclusive flock on the file path, or OutputBusy naming its holder. flock: the kernel drops it
    when the process ends, however it ends, so a requeued job never finds a stale lock. A lock file that
    its last holder removed while this process opened it is opened again, so two holders can never hold
    two different files of the same name."""
    while True:
        try:
            handle = path.open("a+")
        except FileNotFoundError:  # its folder was made, then removed by an unclaimed run's exit (hold_lock)
            path.parent.mkdir(parents=True, exist_ok=True)
            continue
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            handle.seek(0)
            holder = handle.read().strip() or "another process"
            handle.close()
            raise OutputBusy(
                f"output {'folder ' if output.is_dir() else ''}{output} is being written by another run ({holder}): "
                "wait for it or pick another output; "
                "if this is one of a job's ranks, each started alone (e.g. `srun ... apptainer exec "
                "--cleanenv`), pass the scheduler's variables into the container"
            ) from None
        try:
            if os.stat(path).st_ino == os.fstat(handle.fileno()).st_ino:
                break
        except FileNotFoundError:
            pass
        handle.close()
    handle.seek(0)
    handle.truncate()
    handle.write(f"{command}, pid {os.getpid()} on {socket.gethostname()}\n")
    handle.flush()
    return handle


def hold_lock(folder: Path, command: str) -> None:
    """An exclusive lock on folder, held while this process lives: a second run into the same folder
    (a job submitted twice, or ranks that each started alone because a container hid the job's
    variables from them) fails at once instead of writing over this one.

    Until begin claims the folder, the lock is all this process wrote there: a run refused between the two (its
    data checked after the lock, so that a second run fails before it loads anything) takes its lock file away
    when it ends, and the folder and parents it made for it if they are still empty, leaving the disk as it was.
    """
    made = missing_folders(folder)
    folder.mkdir(parents=True, exist_ok=True)
    lock = folder / LOCK_NAME
    made_lock = not lock.exists()
    _held_locks.append(take_lock(lock, command, folder))
    _unclaimed[lock.absolute()] = (lock if made_lock else None, made)


def lock_beside(output: Path, command: str) -> TextIO:
    """The lock beside an output that a command writes whole at its end (`.NAME.lock`; generate's rows): a second
    writer fails at once. Until release_beside, the lock file and the folders made for it are taken away when the
    process ends: a run that fails first leaves no lock file (its partial rows, kept for a resume, stay)."""
    lock_path = output.with_name(f".{output.name}.lock")
    made = missing_folders(output.parent)
    output.parent.mkdir(parents=True, exist_ok=True)
    made_lock = not lock_path.exists()
    handle = take_lock(lock_path, command, output)
    _unclaimed[lock_path.absolute()] = (lock_path if made_lock else None, made)
    return handle


def release_beside(output: Path, handle: TextIO) -> None:
    """The output is whole: its lock file goes and the lock is let go."""
    lock_path = output.with_name(f".{output.name}.lock")
    _unclaimed.pop(lock_path.absolute(), None)
    lock_path.unlink(missing_ok=True)  # before closing: a waiting opener then retries on a new file
    handle.close()


def missing_folders(folder: Path) -> list[Path]:
    """folder and those of its parents that do not exist yet, innermost first."""
    missing = []
    while not folder.exists() and folder != folder.parent:
        missing.append(folder)
        folder = folder.parent
    return missing


def _leave_unclaimed() -> None:
    """At exit: remove what hold_lock and lock_beside made for outputs never claimed or released (the lock file,
    then the folders made for it, while empty)."""
    for lock, folders in _unclaimed.values():
        if lock is not None:
            lock.unlink(missing_ok=True)  # held still: a waiting opener retries on a new file (take_lock)
        remove_empty(folders)
    _unclaimed.clear()


def remove_empty(folders: list[Path]) -> None:
    """Remove folders, innermost first, while they are empty."""
    for folder in folders:
        try:
            folder.rmdir()
        except OSError:  # someone wrote into it meanwhile: kept, and its parents with it
            break


atexit.register(_leave_unclaimed)  # zerokit.foundations.process_end's exit runs it too
os.register_at_fork(after_in_child=_unclaimed.clear)  # a forked child holds no lock: its exit leaves them be


def contents(path: Path) -> dict[str, tuple[int, int]] | None:
    """What path holds, to see whether anyone changed it: {relative path: (size, mtime)}; None if absent."""
    if not path.exists():
        return None
    files = [path] if not path.is_dir() else [path, *sorted(path.rglob("*"))]
    return {str(f.relative_to(path)): (f.lstat().st_size, f.lstat().st_mtime_ns) for f in files}


@contextmanager
def built_beside(output: Path, command: str, flag: str) -> Iterator[Path]:
    """Write a new output (a file or a folder) whole, as its only writer, and never lose anything.

    Yields a temporary sibling to build into, while a lock beside the output keeps a second writer out
    (it fails at once, in one line). At the end the sibling replaces the output in one rename, unless
    someone changed the output meanwhile (a file put into it is never deleted: the run fails and says
    where its result is). A full file system ends the run in one line naming it, the partial output
    removed; any other failure removes the partial output too. The output's prior checks (may it be
    replaced at all) are the command's, done before. A run that fails leaves none of the folders it made for the
    output, unless something else is in them.
    """
    made = missing_folders(output.parent)
    output.parent.mkdir(parents=True, exist_ok=True)
    lock_path = output.with_name(f".{output.name}.lock")
    lock = take_lock(lock_path, command, output)
    partial = output.with_name(f".{output.name}.partial-{os.getpid()}")
    before = contents(output)
    try:
        try:
            yield partial
        except OSError as error:
            remove(partial)
            if error.errno == errno.ENOSPC or "No space left on device" in str(error):  # pyarrow's have no errno
                raise UserError(
                    f"{command}: no space left on the file system at {mount_point(output.parent)} while writing "
                    f"{output}: free space there or pick another {flag}; the partial output was removed"
                ) from None
            raise
        except BaseException:
            remove(partial)
            raise
        if contents(output) != before:
            raise UserError(
                f"{output} changed while {command} ran, so it was not replaced (nothing was deleted); the new "
                f"output is {partial}: move it into place yourself, or run again"
            )
        if before is None:
            os.replace(partial, output)
        else:
            aside = output.with_name(f".{output.name}.replaced-{os.getpid()}")
            os.replace(output, aside)
            os.replace(partial, output)
            remove(aside)
    finally:
        lock_path.unlink(missing_ok=True)  # before closing: a waiting opener then retries on a new file
        lock.close()
        if not output.exists():
            remove_empty(made)


def mount_point(path: Path) -> Path:
    """The mount point of the file system path is on (what `df` names)."""
    path = existing_parent(path.resolve())
    while path != path.parent and path.parent.stat().st_dev == path.stat().st_dev:
        path = path.parent
    return path


def begin(folder: Path, command: str, *, replace: bool) -> OutputRecord:
    """Claim folder for a run of command; with replace, first remove what an earlier run wrote.

    A folder already claimed and not replaced (a resumed run) keeps its record: the entries
    that were foreign stay foreign for the whole chain of resumed runs. Its file keeps the last
    run's words until this run has started (`started`): a resume that fails first (a checkpoint
    that does not load) leaves the folder as it was.
    """
    folder.mkdir(parents=True, exist_ok=True)
    _unclaimed.pop((folder / LOCK_NAME).absolute(), None)  # claimed: what hold_lock made stays with the run
    record = read_record(folder)
    if record is not None and not replace:
        return OutputRecord(command=record.command, foreign=record.foreign)
    if replace:
        for name in written_by_earlier_run(folder, record):
            remove(folder / name)
        foreign = sorted(entries(folder)) if record is None else [n for n in record.foreign if (folder / n).exists()]
        record = OutputRecord(command=command, foreign=foreign)
    else:
        record = OutputRecord(command=command, foreign=sorted(entries(folder)))
    write_record(folder, record)
    return record


def started(folder: Path, record: OutputRecord) -> None:
    """The run has started (its first step has ended; it writes now): its record says it runs, so what it writes
    is its own. Before its first checkpoint, as begin's record is before a new folder's first file."""
    write_record(folder, record)


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
