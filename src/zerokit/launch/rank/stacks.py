"""A rank's Python stacks, as faulthandler writes them, read back: where its main thread is, and whether it
waits in a collective.

Why: a job where one rank is stuck outside any collective (a spinning loop, a data loader that hangs)
and the others wait for it in one (all_reduce, a ZeRO-3 gather at eval or save) used to end, after
the backend's timeout, naming a waiting rank (the one whose collective timed out). The stacks tell
them apart: a rank whose main thread has a frame in torch.distributed or deepspeed.comm (or one of
the waits in WAIT_FRAMES) waits; any other rank is the one the others wait for, and the innermost
frame of the user's own code says where it is.

The text is faulthandler's (Python 3.11, `dump_traceback(all_threads=True)`), after the header line
that zerokit.launch.rank.progress writes first (HEADER), which gives the main thread's id:

    # zerokit rank 1 pid 4242 host node3 main thread 0x00007f...
    Thread 0x00007f... (most recent call first):
      File "/.../threading.py", line 324 in wait
    Current thread 0x00007f... (most recent call first):
      File "script.py", line 12 in <module>
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

HEADER = "# zerokit rank {rank} pid {pid} host {host} main thread 0x{thread:x}\n"
_HEADER = re.compile(r"^# zerokit rank (\S+) pid (\d+) host (\S+) main thread (0x[0-9a-fA-F]+)$", re.M)
_THREAD = re.compile(r"^(?:Current thread|Thread) (0x[0-9a-fA-F]+)")
_FRAME = re.compile(r'^\s+File "(.*)", line (\S+) in (.*)$')
# Frames of a collective or of its wait (path fragments, '/' separated).
COLLECTIVE_PATHS = ("/torch/distributed/", "/deepspeed/comm/")
# Other waits for the peers: (path fragment, function). zerokit's own rendezvous waits for missing ranks.
WAIT_FRAMES = (("/torch/cuda/", "synchronize"), ("/zerokit/launch/rank/rendezvous.py", "wait_for_peers"))
# Wrappers around a collective, not its name.
_WRAPPER_NAMES = ("wrapper", "inner", "log_wrapper", "wait", "beating")
# Library code: the innermost frame outside these is the user's.
_LIBRARY = re.compile(r"/(site|dist)-packages/|/lib/python3\.\d+/|^<")
_ZEROKIT = str(Path(__file__).resolve().parents[1]) + "/"


@dataclass(frozen=True)
class Frame:
    file: str
    line: str
    function: str

    @property
    def where(self) -> str:
        return f"{self.file}:{self.line}"


@dataclass(frozen=True)
class Verdict:
    """One rank's state, read from its stacks."""

    rank: str  # as the header gives it ("?" without one)
    pid: str
    host: str
    frames: tuple[Frame, ...]  # the main thread's, innermost first
    waits_in: str | None  # the collective (or wait) its main thread is in; None: outside any

    @property
    def stuck_at(self) -> str:
        """Where the rank is: the innermost frame of the user's code, else its innermost frame."""
        if not self.frames:
            return "an unknown place (no Python frame)"
        user = next((f for f in self.frames if is_user_code(f.file)), self.frames[0])
        return user.where


def is_user_code(file: str) -> bool:
    return not (_LIBRARY.search(file) or file.startswith(_ZEROKIT))


def threads(text: str) -> dict[int, list[Frame]]:
    """Each thread's frames, innermost first, by thread id."""
    found: dict[int, list[Frame]] = {}
    current: list[Frame] | None = None
    for line in text.splitlines():
        if match := _THREAD.match(line):
            current = found.setdefault(int(match.group(1), 16), [])
        elif current is not None and (match := _FRAME.match(line)):
            current.append(Frame(*match.groups()))
    return found


def main_thread(text: str, found: dict[int, list[Frame]]) -> list[Frame]:
    """The main thread's frames: by the header's id, else the thread not started by threading."""
    header = _HEADER.search(text)
    if header and int(header.group(4), 16) in found:
        return found[int(header.group(4), 16)]
    started = ("/threading.py", "_bootstrap")
    others = [f for f in found.values() if not (f and started[0] in f[-1].file and started[1] in f[-1].function)]
    return (others or list(found.values()) or [[]])[0]


def collective(frames: list[Frame]) -> str | None:
    """The collective (or wait) the frames are in, named by its innermost public function; None if none."""
    inside = [f for f in frames if any(p in f.file for p in COLLECTIVE_PATHS)]
    waits = [f for f in frames if any(p in f.file and f.function == name for p, name in WAIT_FRAMES)]
    if not inside and not waits:
        return None
    named = [f.function for f in inside if not f.function.startswith("_") and f.function not in _WRAPPER_NAMES]
    if named:
        return named[0]
    return waits[0].function if waits else inside[0].function


def verdict(text: str) -> Verdict:
    header = _HEADER.search(text)
    rank, pid, host = header.groups()[:3] if header else ("?", "?", "?")
    frames = main_thread(text, threads(text))
    return Verdict(rank=rank, pid=pid, host=host, frames=tuple(frames), waits_in=collective(frames))
