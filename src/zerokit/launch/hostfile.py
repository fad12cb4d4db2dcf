"""`launch --hostfile`: the hosts of a head-node launch, read as DeepSpeed's and MPI's hostfiles are written.

Each line is `host`, `host slots=N` (DeepSpeed's and OpenMPI's count of a host's GPUs; OpenMPI's `max_slots=M`
may follow), `host:N` (MPICH's and Hydra's), or Grid Engine's `$PE_HOSTFILE` line; `#` starts a comment; blank
lines are skipped; a host on several bare lines (`$PBS_NODEFILE`: once per core) is one host. A line of
anything else is refused with its number: a host named after the first word of a sentence trains nowhere.
A host's slots are the ranks launch starts on it when `--nproc-per-node` is not given; launch starts the same
number on every node, so declared slots must agree with each other and with `--nproc-per-node`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from zerokit.foundations.errors import UserError

FORMS = "one host per line, as `node1`, `node1 slots=8` or `node1:8`"
HOST = r"[A-Za-z0-9_](?:[A-Za-z0-9_.-]*[A-Za-z0-9_])?"  # a hostname or an IPv4 address
LINE = re.compile(rf"(?P<host>{HOST})(?::(?P<colon>\d+)|\s+slots\s*=\s*(?P<slots>\d+)(?:\s+max_slots\s*=\s*\d+)?)?")
# Grid Engine's $PE_HOSTFILE: `host slots queue@host processors`. Its slots count the job's CPU slots, not the
# ranks a node starts (the job scripts give --nproc-per-node), so they are not taken as declared slots.
SGE_LINE = re.compile(rf"(?P<host>{HOST})\s+\d+\s+\S+@\S+(?:\s+\S+)?")


@dataclass(frozen=True)
class Hostfile:
    """A hostfile's hosts in order, each once, and the slots its lines declare (none: every line is bare)."""

    path: str
    hosts: tuple[str, ...]
    slots: dict[str, int]  # host -> slots, for the hosts whose line declares them

    def ranks_per_node(self, nproc_per_node: int | None) -> int | None:
        """The ranks a node runs: --nproc-per-node, else the slots every host declares (None: neither says)."""
        if nproc_per_node is not None:
            wrong = [(host, count) for host, count in self.slots.items() if count != nproc_per_node]
            if wrong:
                host, count = wrong[0]
                raise UserError(
                    f"--nproc-per-node {nproc_per_node}, but hostfile {self.path} gives {host} slots={count}: make "
                    f"them agree (drop --nproc-per-node to start {count} ranks a node, or write slots={nproc_per_node})"
                )
            return nproc_per_node
        declared = set(self.slots.values())
        if not declared:
            return None
        if len(declared) > 1 or len(self.slots) < len(self.hosts):
            counts = ", ".join(f"{host} {self.slots.get(host, 'none')}" for host in self.hosts)
            raise UserError(
                f"hostfile {self.path} declares different slots per host ({counts}): launch starts the same number "
                "of ranks on every node; give each host the same slots=N, or give --nproc-per-node N"
            )
        return declared.pop()


def hosts_and_ranks(path: str | None, nproc_per_node: int | None) -> tuple[tuple[str, ...], int | None]:
    """launch's hosts from --hostfile (none without one) and the ranks a node starts: --nproc-per-node, else
    the slots the hostfile declares (None: neither says)."""
    if path is None:
        return (), nproc_per_node
    hostfile = read_hostfile(path)
    return hostfile.hosts, hostfile.ranks_per_node(nproc_per_node)


def read_hostfile(path: str) -> Hostfile:
    """The hostfile at `path`, parsed (see the module's docstring); one line of UserError on anything else."""
    try:
        with open(path, encoding="utf-8") as file:
            lines = file.read().splitlines()
    except (OSError, UnicodeDecodeError) as err:
        reason = err.strerror if isinstance(err, OSError) else "not text"
        raise UserError(f"cannot read hostfile {path} ({reason}): pass a readable file, {FORMS}") from err
    return parse_hostfile(path, lines)


def parse_hostfile(path: str, lines: list[str]) -> Hostfile:
    hosts: dict[str, int] = {}  # host -> the number of its first line
    slots: dict[str, int] = {}
    for number, line in enumerate(lines, start=1):
        text = line.split("#", 1)[0].strip()
        if not text:
            continue
        match = LINE.fullmatch(text)
        if match is None and (sge := SGE_LINE.fullmatch(text)) is not None:
            hosts.setdefault(sge["host"], number)
            continue
        if match is None:
            raise UserError(f"hostfile {path} line {number} is not a host line: {text!r}; write {FORMS}")
        host, declared = match["host"], match["colon"] or match["slots"]
        if declared is not None and int(declared) < 1:
            raise UserError(f"hostfile {path} line {number}: {host} has {declared} slots; give it 1 or more")
        if host in hosts and (declared is not None or host in slots):
            raise UserError(
                f"hostfile {path} line {number} lists {host} again (line {hosts[host]}): list each host once, "
                "with its slots"
            )
        hosts.setdefault(host, number)
        if declared is not None:
            slots[host] = int(declared)
    if not hosts:
        raise UserError(f"hostfile {path} lists no hosts: write {FORMS}")
    return Hostfile(path, tuple(hosts), slots)
