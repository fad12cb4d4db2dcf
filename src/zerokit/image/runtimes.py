"""Container runtimes, in one table: how to run a command in an image, and how to tell one runs inside.

Read by launch (re-entering the image on other hosts), doctor (the host environment leaking in), the
Makefile (`make smoke`, `make sif`) and the job scripts, through `scripts/container.sh`, which runs this
file with the host's python3 (standard library only):

    python3 src/zerokit/image/runtimes.py argv RUNTIME IMAGE [--gpu] [--bind DIR | --bind SRC:DST]... \
        [--env NAME=VALUE] [--workdir DIR] [--srun] [--as-caller]

one word per line; the runtime's binary is $RUNTIME (in capitals: DOCKER=/usr/bin/docker) when set. A bind
is DIR at its own path, or SRC at DST; --env sets a variable inside (the host's NCCL net plugin:
zerokit.image.plugin_binds gives both).

Adding a runtime is one entry in RUNTIMES (and its tests).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class Runtime:
    name: str
    run: tuple[str, ...]  # argv that runs a command in an image; run[0] is the runtime's binary
    gpu: tuple[str, ...]  # flags that give the container the node's GPUs
    bind: tuple[str, ...]  # words binding {source} at {target} inside
    workdir: tuple[str, ...]  # words making {path} the working directory inside
    passes_host_env: bool  # the host's variables reach the container unless asked otherwise
    inside: str = ""  # variable set inside the container to the image (for re-entry); "" when none is
    host_path: str = ""  # variable holding the host's PATH inside (to find the runtime on another host)
    image: tuple[str, ...] = ("{image}",)  # words naming the image, after the flags and before the command
    srun_options: bool = False  # the words are srun options (pyxis): only for `srun WORDS command`
    as_caller: tuple[str, ...] = ()  # words that run the command as the caller ({uid}, {gid}), who may have no home
    env: tuple[str, ...] = ("--env", "{name}={value}")  # words setting {name} to {value} inside

    def argv(
        self,
        image: str,
        gpu: bool = False,
        binds: Sequence[str] = (),
        workdir: str = "",
        as_caller: bool = False,
        environ: Mapping[str, str] = {},
        variables: Mapping[str, str] = {},
    ) -> list[str]:
        """The words before the command: run IMAGE with GPUS, each bind DIR at the same path (or SRC:DST at DST),
        with VARIABLES set inside, in WORKDIR.

        The binary is $NAME when ENVIRON sets it (DOCKER=/usr/bin/docker), else found on PATH by name."""
        run = (environ.get(self.name.upper()) or self.run[0], *self.run[1:]) if self.run else ()
        words = [*run, *(self.gpu if gpu else ())]
        if as_caller:
            words += [word.format(uid=os.getuid(), gid=os.getgid()) for word in self.as_caller]
        for path in binds:
            source, _, target = path.partition(":")
            words += [word.format(source=source, target=target or source) for word in self.bind]
        for name, value in variables.items():
            words += [word.format(name=name, value=value) for word in self.env]
        if workdir:
            words += [word.format(path=workdir) for word in self.workdir]
        return [*words, *(word.format(image=image) for word in self.image)]


def _apptainer(name: str) -> Runtime:
    variable = f"{name.upper()}_CONTAINER"
    bind, workdir = ("--bind", "{source}:{target}"), ("--pwd", "{path}")
    return Runtime(name, (name, "exec"), ("--nv",), bind, workdir, True, variable, "USER_PATH")


def _docker_like(name: str, gpu: tuple[str, ...]) -> Runtime:
    run = (name, "run", "--rm", "--network", "host", "--ipc", "host")
    caller = ("--user", "{uid}:{gid}", "--env", "HOME=/tmp")
    bind, workdir, env = ("-v", "{source}:{target}"), ("-w", "{path}"), ("-e", "{name}={value}")
    return Runtime(name, run, gpu, bind, workdir, False, as_caller=caller, env=env)


RUNTIMES: dict[str, Runtime] = {
    runtime.name: runtime
    for runtime in (
        _apptainer("apptainer"),
        _apptainer("singularity"),
        _docker_like("docker", ("--gpus", "all")),
        _docker_like("podman", ("--device", "nvidia.com/gpu=all")),  # CDI: nvidia-ctk cdi generate, once per node
        # A directory from `ch-convert IMAGE DIR` (--set-env: the image's ENV); GPUs: `ch-fromhost --nvidia DIR`.
        # A bound path must exist in the image (/tmp is the host's): a host NCCL plugin goes in with ch-fromhost.
        Runtime(
            "charliecloud",
            ("ch-run", "--set-env"),
            (),
            ("--bind={source}:{target}",),
            ("--cd={path}",),
            True,
            image=("{image}", "--"),
            env=("--set-env={name}={value}",),
        ),
        # enroot images through Slurm's pyxis plugin: srun's own options; the GPUs are srun's. srun keeps only
        # its last --export: one variable at most (the plugin's, from which launch sets the others inside).
        Runtime(
            "pyxis",
            (),
            (),
            ("--container-mounts={source}:{target}",),
            ("--container-workdir={path}",),
            True,
            image=("--container-image={image}",),
            srun_options=True,
            env=("--export=ALL,{name}={value}",),
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


SWITCHES = ("--gpu", "--srun", "--as-caller")


def words_for(name: str, image: str, options: Sequence[str], environ: Mapping[str, str] = {}) -> list[str]:
    """`argv`'s words for the command line's RUNTIME IMAGE [--gpu] [--bind DIR | --bind SRC:DST]...
    [--env NAME=VALUE]... [--workdir DIR] [--srun] [--as-caller]."""
    runtime = runtime_named(name)
    switches, binds, variables, workdir = set(), [], {}, ""
    rest = list(options)
    while rest:
        flag = rest.pop(0)
        if flag in SWITCHES:
            switches.add(flag)
        elif flag in ("--bind", "--workdir", "--env") and rest:
            value = rest.pop(0)
            if flag == "--bind":
                binds.append(value)
            elif flag == "--env":
                variable, _, text = value.partition("=")
                variables[variable] = text
            else:
                workdir = value
        else:
            raise ValueError(f"runtimes.py: unexpected {flag!r}")
    if runtime.srun_options and "--srun" not in switches:
        raise ValueError(f"{name} runs through srun's options: use it in the Slurm job scripts, or apptainer here")
    as_caller = "--as-caller" in switches
    return runtime.argv(image, "--gpu" in switches, binds, workdir, as_caller, environ, variables)


def main(argv: list[str]) -> int:
    try:
        if len(argv) >= 3 and argv[0] == "argv":
            print("\n".join(words_for(argv[1], argv[2], argv[3:], os.environ)))
        else:
            print(__doc__.split("\n\n")[2], file=sys.stderr)
            return 2
    except ValueError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
