"""launch's stall watch over the ranks it started (spawn mode): a job where no rank makes progress for
`--stall-timeout` seconds is ended, naming the rank that the others wait for.

Why (issue 28): a rank stuck outside any collective (a spinning loop, a data loader that hangs) while
the others wait for it in one sat until the backend's timeout (30 minutes for gloo, HF and DeepSpeed),
and then the rank named was a waiting one, whose collective timed out.

How: each rank publishes its last progress (zerokit.launch.rank.progress defines it: a completed collective,
a Trainer step, or heartbeat()) as the time of a file in a folder launch owns (`rank-R.progress`).
Once any rank has published, launch looks once a second at the newest; when it is `timeout` old:
- it asks each rank for its Python stacks (progress.DUMP_SIGNAL; faulthandler writes them to
  `rank-R.stacks`), and on NVIDIA GPUs for its NCCL flight recorder's dump (the pipe PyTorch reads,
  TORCH_NCCL_DEBUG_INFO_PIPE_FILE; the dump is written to TORCH_NCCL_DEBUG_INFO_TEMP_FILE);
- it reads each main thread's stack (zerokit.launch.rank.stacks): a rank in a collective waits, any other
  rank is stuck, at the innermost frame of the user's code;
- it writes every rank's stacks into one file beside the run, `zerokit-stall-<host>-<time>.txt`: in the
  command's output folder (--output_dir) if its command line names one, else in launch's working folder
  (where a job script's log is written; launch keeps no folder of its own); NCCL dumps are copied beside it;
- it ends the job as for a failed rank (SIGTERM, SIGKILL after --stop-grace), and exits 124 with one line:
  `launch: stalled: no rank made progress for 60 s; rank 1 (node X, pid P) is stuck at script.py:12
  outside any collective; rank 0 waits in all_reduce; stacks in PATH`.

Under one launch per node, each watches its own ranks: the node of the stuck rank names it; on a
node whose ranks all wait, the line says the stuck rank is elsewhere.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import socket
import tempfile
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from zerokit.launch.rank import stacks
from zerokit.launch.rank.progress import (
    DIR_VARIABLE,
    DUMP_SIGNAL,
    NCCL_DUMP_VARIABLE,
    NCCL_PIPE_VARIABLE,
    STACKS_VARIABLE,
    TIMEOUT_VARIABLE,
    keep_nccl_dumps,
    request_nccl_dump,
)

DEFAULT_STALL_TIMEOUT = 900.0  # seconds: 15 minutes, under the 30 of gloo's, HF's and DeepSpeed's timeouts
CHECK_SECONDS = 1.0
DUMP_WAIT_SECONDS = 5.0  # for faulthandler (written at once by its signal handler)
NCCL_TRACE_ENTRIES = "2000"
NVIDIA_DRIVER = Path("/proc/driver/nvidia/version")


def timeout_words(timeout: float) -> str:
    """How the start-up line gives the watch."""
    return f"stall timeout {timeout:g} s" if timeout > 0 else "no stall timeout"


def nccl_env(prefix: str, environ: Mapping[str, str]) -> dict[str, str]:
    """The flight recorder's variables (on NVIDIA GPUs): entries kept, where dumps go, the pipe asking for one.

    A variable the user set is kept as it is."""
    if not NVIDIA_DRIVER.exists():
        return {}
    wanted = {
        "TORCH_NCCL_TRACE_BUFFER_SIZE": NCCL_TRACE_ENTRIES,
        "TORCH_NCCL_DUMP_ON_TIMEOUT": "1",
        NCCL_DUMP_VARIABLE: f"{prefix}nccl-trace-rank-",
        "TORCH_FR_DUMP_TEMP_FILE": f"{prefix}nccl-trace-rank-",  # the name in newer PyTorch
        NCCL_PIPE_VARIABLE: f"{prefix}nccl-pipe-rank-",
    }
    return {name: value for name, value in wanted.items() if name not in environ}


def exec_env(timeout: float, report_folder: Path, rank: str) -> dict[str, str]:
    """Exec mode: the variables that start the rank's own watch (zerokit.launch.rank.progress), none when off."""
    if timeout <= 0:
        return {}
    stacks_file = report_folder / f"zerokit-stall-{socket.gethostname()}-rank-{rank}.txt"
    # The flight recorder's pipe and dump in a folder that exists when the process group starts (PyTorch
    # fails to start it without); the rank's watch copies the dump beside its stacks.
    nccl = f"{tempfile.gettempdir()}/zerokit-stall-{os.getpid()}-"
    return {TIMEOUT_VARIABLE: f"{timeout:g}", STACKS_VARIABLE: str(stacks_file), **nccl_env(nccl, os.environ)}


@dataclass(frozen=True)
class Watched:
    """What the watch needs of a running rank."""

    rank: str
    label: str
    pid: int


class StallWatch:
    """The folder the ranks publish into, and the stall check and report (see the module's docstring)."""

    def __init__(self, timeout: float, report_folder: Path) -> None:
        self.timeout = timeout
        self.report_folder = report_folder
        self.folder = Path(tempfile.mkdtemp(prefix="zerokit-stall-"))
        self.next_check = 0.0

    def rank_env(self) -> dict[str, str]:
        return {
            TIMEOUT_VARIABLE: f"{self.timeout:g}",
            DIR_VARIABLE: str(self.folder),
            **nccl_env(f"{self.folder}/", os.environ),
        }

    def idle_for(self) -> float | None:
        """Seconds since any rank's last progress, when the timeout has passed; else None (checked once a second)."""
        now = time.monotonic()
        if now < self.next_check:
            return None
        self.next_check = now + CHECK_SECONDS
        times = []
        for path in self.folder.glob("rank-*.progress"):
            with contextlib.suppress(OSError):
                times.append(path.stat().st_mtime)
        if not times:
            return None  # no rank has made progress yet: not watched (progress.py)
        idle = time.time() - max(times)
        return idle if idle >= self.timeout else None

    def report(self, ranks: Sequence[Watched], idle: float) -> str:
        """Ask the ranks for their stacks, write them beside the run; the one line naming the stuck rank(s)."""
        asked = {}
        for rank in ranks:
            path = self.folder / f"rank-{rank.rank}.stacks"
            if path.exists():
                with contextlib.suppress(ProcessLookupError):
                    os.kill(rank.pid, DUMP_SIGNAL)
                    asked[rank.rank] = path
        nccl = [r.rank for r in ranks if request_nccl_dump(self.folder / f"nccl-pipe-rank-{r.rank}.pipe")]
        texts = wait_for_dumps(asked, DUMP_WAIT_SECONDS)
        target = self.report_folder / f"zerokit-stall-{socket.gethostname()}-{time.strftime('%Y%m%dT%H%M%S')}.txt"
        verdicts = {rank: stacks.verdict(text) for rank, text in texts.items()}
        line = stall_line(ranks, verdicts, idle, target)
        try:
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(stacks_file_text(ranks, texts, verdicts, line))
            keep_nccl_dumps({rank: self.folder / f"nccl-trace-rank-{rank}" for rank in nccl}, target)
        except OSError as err:
            line = line.replace(f"stacks in {target}", f"stacks not written to {target} ({err.strerror})")
        return line

    def reset(self) -> None:
        """Forget the ended ranks' progress: restarted ranks are watched from their own first progress on."""
        for path in self.folder.glob("rank-*.progress"):
            path.unlink(missing_ok=True)

    def close(self) -> None:
        shutil.rmtree(self.folder, ignore_errors=True)


def wait_for_dumps(asked: dict[str, Path], seconds: float) -> dict[str, str]:
    """Each asked rank's stacks file, once it holds a stack past its header (or at the deadline)."""
    deadline = time.monotonic() + seconds
    texts: dict[str, str] = {}
    while True:
        for rank, path in asked.items():
            with contextlib.suppress(OSError):
                texts[rank] = path.read_text(errors="replace")
        complete = len(texts) == len(asked) and all(stacks.threads(t) for t in texts.values())
        if complete or time.monotonic() >= deadline:
            time.sleep(0.2)  # faulthandler writes thread after thread: let it finish
            for rank, path in asked.items():
                with contextlib.suppress(OSError):
                    texts[rank] = path.read_text(errors="replace")
            return texts
        time.sleep(0.1)


def stall_line(ranks: Sequence[Watched], verdicts: dict[str, stacks.Verdict], idle: float, target: Path) -> str:
    host = socket.gethostname()
    stuck, waiting, silent = [], [], []
    for rank in ranks:
        found = verdicts.get(rank.rank)
        if found is None or not found.frames:
            silent.append(f"rank {rank.rank}")
        elif found.waits_in:
            waiting.append(f"rank {rank.rank} waits in {found.waits_in}")
        else:
            stuck.append(
                f"rank {rank.rank} (node {host}, pid {rank.pid}) is stuck at {found.stuck_at} outside any collective"
            )
    parts = [*stuck, *waiting]
    if silent:
        parts.append(f"{', '.join(silent)} gave no Python stack")
    if waiting and not stuck and not silent:
        parts.append("the rank they wait for is on another node, or the collective itself hangs")
    return f"stalled: no rank made progress for {idle:.0f} s; {'; '.join(parts)}; stacks in {target}"


def stacks_file_text(
    ranks: Sequence[Watched], texts: dict[str, str], verdicts: dict[str, stacks.Verdict], line: str
) -> str:
    sections = [f"launch: {line}\n"]
    for rank in ranks:
        found = verdicts.get(rank.rank)
        state = "no stack" if found is None else f"waits in {found.waits_in}" if found.waits_in else found.stuck_at
        sections.append(f"== {rank.label}, pid {rank.pid}: {state} ==\n" + texts.get(rank.rank, "(no stacks file)\n"))
    return "\n".join(sections)
