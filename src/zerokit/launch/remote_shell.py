"""`ssh` inside the image, for launchers that start ranks on other hosts: their remote command runs in this
same image there (the other host has the runtime, not the image's /opt/venv).

DeepSpeed's own launcher (`deepspeed --hostfile H script.py`) runs `/opt/venv/bin/python -m
deepspeed.launcher.launch ...` on every host over pdsh's ssh, or starts OpenMPI's `orted` over ssh with
`--launcher openmpi`; neither knows about containers, and neither is patched. entrypoints/ssh, first on the
image's PATH, hands ssh's words to this module inside an Apptainer/Singularity container; it rewrites

    ssh [options] HOST COMMAND...
    ssh [options] HOST env PATH=<host PATH> apptainer exec --nv IMAGE bash -c 'COMMAND...'

when the caller is a launcher (pdsh, mpirun, orted: the parent process's name), the command does not
already enter the image (zerokit's own `launch --launcher pdsh` does), and there is a command. Anything
else (an interactive login, git, DeepSpeed's `ssh HOST hostname -I` check) is the system's ssh, unchanged.
"""

from __future__ import annotations

import os
import shlex
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path

from zerokit.image.runtimes import inside

SSH = "/usr/bin/ssh"
# ssh's options that take a value (OpenSSH 9, ssh(1)): the first other word is the host.
WITH_VALUE = set("BbcDEeFIiJLlmOoPpQRSWw")
# The launchers whose remote commands must run in the image: command names (/proc/PID/comm). Debian's
# and Ubuntu's pdsh is a script that runs pdsh.bin.
LAUNCHERS = ("pdsh", "pdsh.bin", "mpirun", "mpiexec", "orterun", "prterun", "orted", "prted")


def split_ssh(words: Sequence[str]) -> tuple[list[str], str | None, list[str]]:
    """(options, host, command words) of ssh's arguments."""
    options: list[str] = []
    rest = list(words)
    while rest:
        word = rest.pop(0)
        if word == "--":
            break
        if not word.startswith("-") or word == "-":
            return options, word, rest
        options.append(word)
        if len(word) == 2 and word[1] in WITH_VALUE and rest:
            options.append(rest.pop(0))
    return options, (rest.pop(0) if rest else None), rest


def parent_name(proc: Path = Path("/proc")) -> str:
    try:
        return (proc / str(os.getppid()) / "comm").read_text().strip()
    except OSError:
        return ""


def remote_argv(words: Sequence[str], environ: Mapping[str, str], caller: str) -> list[str]:
    """The ssh command to run for ssh's arguments `words` (see the module's docstring)."""
    found = inside(environ)
    options, host, command = split_ssh(words)
    if found is None or host is None or not command or caller not in LAUNCHERS:
        return [SSH, *words]
    runtime, image = found
    line = " ".join(command)  # as ssh sends it: the words joined by spaces, for the remote shell
    if image in line:
        return [SSH, *words]
    host_path = environ.get(runtime.host_path, "") if runtime.host_path else ""
    enter = runtime.argv(image, gpu=True)
    remote = [*(["env", f"PATH={host_path}"] if host_path else []), *enter, "bash", "-c", line]
    return [SSH, *options, host, shlex.join(remote)]


def main(argv: Sequence[str]) -> int:
    words = remote_argv(argv, os.environ, parent_name())
    os.execv(words[0], words)
    return 127


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
