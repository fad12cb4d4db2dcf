"""A rank's side of the stall watch: it tells when it last made progress, and gives its stacks when asked.

Progress is any of:
- a completed torch.distributed collective (all_reduce, barrier, broadcast, all_gather_into_tensor, send,
  ...; the functions of `torch.distributed` that deepspeed.comm, accelerate and HF call are wrapped
  once, before the script runs: one clock read per call, a file's time touched at most once a second);
  an `async_op=True` collective counts when it is issued. The process group's start (init_process_group
  returning: every rank arrived) counts too, and starts the watch;
- a Trainer step or evaluation step (HF's Trainer and zerokit's train: every Trainer's CallbackHandler
  reports on_step_end, on_substep_end and on_prediction_step);
- `heartbeat()`, for a script whose ranks do long work of their own with no collective between:
  `from zerokit.launch.rank.progress import heartbeat`, called in its loop (cheap: at most one touch a second).

The watch starts with a rank's first progress: before it (imports, a model's download before the
process group starts) nothing is watched but the rendezvous (zerokit.launch.rank.rendezvous). After it, a
phase where no rank makes progress for the stall timeout is a stall: a rank-0-only save or
evaluation longer than that needs heartbeat() in it, or a longer --stall-timeout.

Two modes, chosen by the variables `launch` sets (zerokit.launch.watch.stall):
- supervised (ZEROKIT_STALL_DIR, launch's spawn mode): the rank touches `rank-R.progress` there, and
  faulthandler writes all its threads' stacks to `rank-R.stacks` on DUMP_SIGNAL; launch decides.
- alone (only ZEROKIT_STALL_TIMEOUT: launch exec'd into the rank under srun/mpirun, so nothing
  supervises it): a daemon thread here watches the rank's own progress. At the timeout it writes its
  stacks to ZEROKIT_STALL_STACKS and says in one line where the rank is; a rank outside any collective
  exits at once (124, as timeout(1)), a rank waiting in one GRACE_SECONDS later (unless progress
  resumed), so that the stuck rank's line comes first and the scheduler ends the job on its exit. A
  rank can only judge itself: it cannot name a peer, and a rank whose main thread holds the GIL in
  native code cannot run the thread (its peers still end the job). A waiting rank whose collective
  fails first (the stuck peer exited before this rank's own watch fired: which comes first is a race
  between two clocks) says so in one line too, naming the collective and how long it waited, so a
  waiting rank always has its line.

DUMP_SIGNAL is a real-time signal, not SIGUSR2: launch passes SIGUSR1/SIGUSR2 on to the ranks as a
scheduler's warning (zerokit.launch.watch.supervisor), and scripts use them; a real-time signal is free.
faulthandler writes from its C signal handler, so a main thread stuck in native code (a gloo or NCCL
wait) still gives its Python stack.
"""

from __future__ import annotations

import contextlib
import faulthandler
import functools
import importlib.util
import os
import shutil
import signal
import socket
import sys
import tempfile
import threading
import time
from collections.abc import Callable, MutableMapping
from pathlib import Path
from typing import Any, TextIO

from zerokit.launch.rank import rendezvous, stacks

DUMP_SIGNAL = signal.SIGRTMIN + 2
STALL_EXIT_CODE = 124  # as timeout(1)
TIMEOUT_VARIABLE = "ZEROKIT_STALL_TIMEOUT"
DIR_VARIABLE = "ZEROKIT_STALL_DIR"
STACKS_VARIABLE = "ZEROKIT_STALL_STACKS"
NCCL_PIPE_VARIABLE = "TORCH_NCCL_DEBUG_INFO_PIPE_FILE"
NCCL_DUMP_VARIABLE = "TORCH_NCCL_DEBUG_INFO_TEMP_FILE"
NCCL_DUMP_WAIT_SECONDS = 15.0  # for the flight recorder (its monitor thread reads the pipe each second)
PUBLISH_SECONDS = 1.0
GRACE_SECONDS = 10.0
# The torch.distributed functions whose return is progress (those that exist in the installed torch).
COLLECTIVES = (
    "all_reduce", "all_gather", "all_gather_into_tensor", "all_gather_object", "all_to_all", "all_to_all_single",
    "reduce_scatter", "reduce_scatter_tensor", "reduce", "broadcast", "broadcast_object_list", "gather",
    "gather_object", "scatter", "scatter_object_list", "barrier", "monitored_barrier", "send", "recv", "isend",
    "irecv", "batch_isend_irecv", "_all_gather_base", "_reduce_scatter_base",
)  # fmt: skip
TRAINER_EVENTS = ("on_step_end", "on_substep_end", "on_prediction_step")


class _State:
    """This rank's watch, once started."""

    def __init__(self, timeout: float, rank: str, progress_file: Path | None) -> None:
        self.timeout = timeout
        self.rank = rank
        self.progress_file = progress_file  # supervised: the file launch reads; alone: None
        self.last: float | None = None  # time.monotonic() of the last published progress
        self.stacks_file: TextIO | None = None  # kept open for faulthandler


_state: _State | None = None


def heartbeat() -> None:
    """This rank made progress (see the module's docstring); a no-op outside a watched job."""
    state = _state
    if state is None:
        return
    now = time.monotonic()
    if state.last is not None and now - state.last < PUBLISH_SECONDS:
        return
    state.last = now
    if state.progress_file is not None:
        try:
            os.utime(state.progress_file)
        except FileNotFoundError:
            state.progress_file.touch()
        except OSError:
            pass  # launch's folder is gone: the job is ending


def start(environ: MutableMapping[str, str], collectives: bool, trainer_steps: bool) -> None:
    """Start this rank's watch when launch asked for one (ZEROKIT_STALL_TIMEOUT > 0); else do nothing.

    `collectives`: wrap torch.distributed (imports it); `trainer_steps`: report the Trainer's steps (imports
    transformers). Called by the bootstraps (zerokit.launch.rank.user_script, zerokit.train.run) before the work.
    """
    global _state
    try:
        timeout = float(environ.get(TIMEOUT_VARIABLE, "0") or "0")
    except ValueError:
        timeout = 0.0
    if timeout <= 0 or _state is not None:
        return
    rank = environ.get("RANK", "0")
    folder = environ.get(DIR_VARIABLE)
    _state = _State(timeout, rank, Path(folder, f"rank-{rank}.progress") if folder else None)
    if folder:
        _state.stacks_file = open_stacks(Path(folder, f"rank-{rank}.stacks"), rank)
        faulthandler.register(DUMP_SIGNAL, file=_state.stacks_file, all_threads=True)
    else:
        stacks_path = Path(environ.get(STACKS_VARIABLE) or f"zerokit-stall-rank-{rank}.txt")
        threading.Thread(target=_watch_alone, args=(_state, stacks_path), name="zerokit-stall", daemon=True).start()
    if collectives and importlib.util.find_spec("torch") is not None:
        import torch.distributed as dist

        if dist.is_available():
            wrap_collectives(dist)
    if trainer_steps and importlib.util.find_spec("transformers") is not None:
        from transformers.trainer_callback import CallbackHandler

        for name in TRAINER_EVENTS:
            if hasattr(CallbackHandler, name):
                setattr(CallbackHandler, name, _beating(getattr(CallbackHandler, name)))


def open_stacks(path: Path, rank: str) -> TextIO:
    """The stacks file, its header written (HEADER: names the main thread, which faulthandler does not)."""
    file = path.open("w")
    file.write(
        stacks.HEADER.format(rank=rank, pid=os.getpid(), host=socket.gethostname(), thread=threading.get_ident())
    )
    file.flush()
    return file


def _beating(function: Callable[..., Any]) -> Callable[..., Any]:
    if getattr(function, "__zerokit_progress__", False):
        return function

    @functools.wraps(function)
    def beating(*args: Any, **kwargs: Any) -> Any:
        result = function(*args, **kwargs)
        heartbeat()
        return result

    beating.__zerokit_progress__ = True  # type: ignore[attr-defined]
    return beating


def _reporting_failures(collective: Callable[..., Any]) -> Callable[..., Any]:
    """Exec mode: a collective that fails says, in one line, how long this rank waited in it (then raises)."""

    @functools.wraps(collective)
    def reporting(*args: Any, **kwargs: Any) -> Any:
        entered = time.monotonic()
        try:
            return collective(*args, **kwargs)
        except Exception as err:
            first = (str(err).strip().splitlines() or [""])[0][:200]
            print(
                f"zerokit: rank {os.environ.get('RANK', '0')} (node {socket.gethostname()}, pid {os.getpid()}) "
                f"waited {time.monotonic() - entered:.1f} s in {collective.__name__} until it failed "
                f"({type(err).__name__}: {first}): a peer ended or is stuck (see its line)",
                file=sys.stderr,
                flush=True,
            )
            raise

    return reporting


def wrap_collectives(dist: Any) -> None:
    """Each collective of `dist` (torch.distributed) reports progress when it returns; init_process_group
    first waits for the peers, bounded (zerokit.launch.rank.rendezvous)."""
    alone = _state is not None and _state.progress_file is None
    for name in COLLECTIVES:
        if callable(getattr(dist, name, None)):
            collective = getattr(dist, name)
            if alone and not getattr(collective, "__zerokit_progress__", False):
                collective = _reporting_failures(collective)
            setattr(dist, name, _beating(collective))
    init = dist.init_process_group
    if getattr(init, "__zerokit_progress__", False):
        return

    @functools.wraps(init)
    def init_process_group(*args: Any, **kwargs: Any) -> Any:
        world_size = int(kwargs.get("world_size", -1))
        if world_size < 0:
            world_size = int(os.environ.get("WORLD_SIZE", "1") or "1")
        rank = int(kwargs.get("rank", -1))
        if rank < 0:
            rank = int(os.environ.get("RANK", "0") or "0")
        env_rendezvous = not args[1:] and kwargs.get("store") is None and kwargs.get("init_method") in (None, "env://")
        if _state is not None and env_rendezvous and world_size > 1 and "MASTER_PORT" in os.environ:
            rendezvous.wait_for_peers(os.environ, _state.timeout, rank, world_size)
        result = init(*args, **kwargs)
        heartbeat()
        return result

    init_process_group.__zerokit_progress__ = True  # type: ignore[attr-defined]
    dist.init_process_group = init_process_group


def request_nccl_dump(pipe: Path) -> bool:
    """Ask a rank's NCCL flight recorder for its dump: a write to the pipe PyTorch reads (GPUs only)."""
    try:
        fd = os.open(pipe, os.O_WRONLY | os.O_NONBLOCK)
    except OSError:  # no pipe (no NCCL process group), or no reader
        return False
    try:
        os.write(fd, b"1")
    except OSError:
        return False
    finally:
        os.close(fd)
    return True


def keep_nccl_dumps(dumps: dict[str, Path], stacks_path: Path) -> None:
    """Copy each rank's flight recorder dump beside the stacks (`<stacks>-nccl-rank-R`), as they come."""
    deadline = time.monotonic() + (NCCL_DUMP_WAIT_SECONDS if dumps else 0)
    while dumps and time.monotonic() < deadline:
        for rank, dump in list(dumps.items()):
            if dump.is_file():
                with contextlib.suppress(OSError):
                    shutil.copyfile(dump, stacks_path.with_name(f"{stacks_path.stem}-nccl-rank-{rank}"))
                del dumps[rank]
        time.sleep(0.2)


def own_stacks(rank: str) -> str:
    """This process's stacks, all threads, with the header (as launch would get them)."""
    with tempfile.TemporaryFile("w+") as file:
        main = threading.main_thread().ident or 0
        file.write(stacks.HEADER.format(rank=rank, pid=os.getpid(), host=socket.gethostname(), thread=main))
        file.flush()
        faulthandler.dump_traceback(file, all_threads=True)
        file.seek(0)
        return file.read()


def _watch_alone(state: _State, stacks_path: Path) -> None:
    """Exec mode: the rank's own watch (see the module's docstring). Runs in a daemon thread."""
    while True:
        time.sleep(PUBLISH_SECONDS)
        last = state.last
        if last is None or time.monotonic() - last < state.timeout:
            continue
        text = own_stacks(state.rank)
        try:
            stacks_path.parent.mkdir(parents=True, exist_ok=True)
            stacks_path.write_text(text)
            saved = f"its stacks in {stacks_path}"
        except OSError as err:
            sys.stderr.write(text)
            saved = f"its stacks above (not written to {stacks_path}: {err.strerror})"
        pipe, dump = os.environ.get(NCCL_PIPE_VARIABLE), os.environ.get(NCCL_DUMP_VARIABLE)
        if pipe and dump and request_nccl_dump(Path(f"{pipe}{state.rank}.pipe")):
            keep_nccl_dumps({state.rank: Path(f"{dump}{state.rank}")}, stacks_path)
        found = stacks.verdict(text)
        where = (
            f"waits in {found.waits_in} (a peer is stuck: see its line)"
            if found.waits_in
            else f"is stuck at {found.stuck_at} outside any collective"
        )
        print(
            f"zerokit: stalled: rank {state.rank} (node {socket.gethostname()}, pid {os.getpid()}) made no progress "
            f"for {state.timeout:g} s and {where}; {saved}",
            file=sys.stderr,
            flush=True,
        )
        if found.waits_in:
            time.sleep(GRACE_SECONDS)
            if state.last != last:  # the collective completed after all
                continue
        os._exit(STALL_EXIT_CODE)
