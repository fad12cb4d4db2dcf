"""Container runtimes, in one table: how to run a command in an image, and how to tell one runs inside.

Read by launch (re-entering the image on other hosts), doctor (the host environment leaking in), the
Makefile (`make smoke`) and the job scripts, through `scripts/container.sh`, which runs this file with
the host's python3 (standard library only):

    python3 src/zerokit/runtimes.py argv RUNTIME IMAGE [--gpu] [--bind DIR]...   # one word per line
"""

from __future__ import annotations

import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class Runtime:
    name: str
    run: tuple[str, ...]  # argv that runs a command in an image; the image follows the flags
    gpu: tuple[str, ...]  # flags that give the container the node's GPUs
    bind: str  # flag taking SRC:DEST
    workdir: str  # flag naming the working directory inside
    passes_host_env: bool  # the host's variables reach the container unless asked otherwise
    inside: str  # variable set inside the container (to the image, for re-entry); "" when none is
    separator: tuple[str, ...] = ()  # between the image and the command

    def argv(self, image: str, gpu: bool = False, binds: Sequence[str] = (), workdir: str = "") -> list[str]:
        """The words before the command: run IMAGE with GPUS, each bind DIR at the same path, in WORKDIR."""
        words = [*self.run, *(self.gpu if gpu else ())]
        for path in binds:
            words += [self.bind, f"{path}:{path}"]
        if workdir:
            words += [self.workdir, workdir]
        return [*words, image, *self.separator]


RUNTIMES: dict[str, Runtime] = {
    runtime.name: runtime
    for runtime in (
        Runtime("apptainer", ("apptainer", "exec"), ("--nv",), "--bind", "--pwd", True, "APPTAINER_CONTAINER"),
        Runtime("singularity", ("singularity", "exec"), ("--nv",), "--bind", "--pwd", True, "SINGULARITY_CONTAINER"),
        Runtime(
            "docker",
            ("docker", "run", "--rm", "--network", "host", "--ipc", "host"),
            ("--gpus", "all"),
            "-v",
            "-w",
            False,
            "",
        ),
    )
}


def runtime_named(name: str) -> Runtime:
    try:
        return RUNTIMES[name]
    except KeyError:
        raise ValueError(f"unknown container runtime {name!r}: use one of {', '.join(RUNTIMES)} (or none)") from None


def inside(environ: Mapping[str, str]) -> tuple[Runtime, str] | None:
    """(runtime, image) this process runs in, as the runtime's own variable says; None outside one."""
    for runtime in RUNTIMES.values():
        if runtime.inside and environ.get(runtime.inside):
            return runtime, environ[runtime.inside]
    return None


def main(argv: list[str]) -> int:
    if len(argv) < 3 or argv[0] != "argv":
        print("usage: runtimes.py argv RUNTIME IMAGE [--gpu] [--bind DIR]... [--workdir DIR]", file=sys.stderr)
        return 2
    name, image, rest = argv[1], argv[2], argv[3:]
    gpu, binds, workdir = False, [], ""
    while rest:
        flag, rest = rest[0], rest[1:]
        if flag == "--gpu":
            gpu = True
        elif flag in ("--bind", "--workdir") and rest:
            value, rest = rest[0], rest[1:]
            binds, workdir = ([*binds, value], workdir) if flag == "--bind" else (binds, value)
        else:
            print(f"runtimes.py: unexpected {flag!r}", file=sys.stderr)
            return 2
    try:
        runtime = runtime_named(name)
    except ValueError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    print("\n".join(runtime.argv(image, gpu, binds, workdir)))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
