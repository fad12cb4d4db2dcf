"""The base of every cluster environment, and the helpers they share.

An environment is built from an `environ` mapping and keeps a private snapshot of it: it never
reads or writes os.environ, so tests pass plain dicts. Values are read when asked for, so one that
cannot be known (a main address without a host list) raises a UserError only where it is needed.
"""

from __future__ import annotations

import re
from abc import ABC, abstractmethod
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import ClassVar

import hostlist

from zerokit.cluster.tools import Tool
from zerokit.foundations.errors import UserError
from zerokit.foundations.values import tcp_port, whole_number

# torch's own default, for a job that has no id to derive a port from.
DEFAULT_PORT = 29500
# Ports derived from a job id stay in [PORT_BASE, PORT_BASE + PORT_SPAN), below Linux's default
# ephemeral range (32768-60999) where the kernel picks the local ports of outgoing connections.
PORT_BASE = 20000
PORT_SPAN = 12000


@dataclass(frozen=True)
class RankEnv:
    """Where one rank stands in its job, as torch.distributed's env:// start-up reads it. Defined here
    once: a scheduler's environment gives one (ClusterEnvironment.rank_env), launch makes one per rank
    it starts, and `variables` is the one place they become the process's environment. LOCAL_SIZE repeats
    LOCAL_WORLD_SIZE for DeepSpeed: its shared-memory all-reduce on CPU ranks (tensor-parallel inference)
    reads it, and without it every rank dies in it with SIGSEGV."""

    rank: int
    local_rank: int
    world_size: int
    local_world_size: int
    node_rank: int
    main_address: str
    main_port: int

    def variables(self) -> dict[str, str]:
        return {
            "RANK": str(self.rank),
            "LOCAL_RANK": str(self.local_rank),
            "WORLD_SIZE": str(self.world_size),
            "LOCAL_WORLD_SIZE": str(self.local_world_size),
            "LOCAL_SIZE": str(self.local_world_size),  # the same, as DeepSpeed's CPU all-reduce reads it
            "GROUP_RANK": str(self.node_rank),
            "MASTER_ADDR": self.main_address,
            "MASTER_PORT": str(self.main_port),
        }


def port_from_job_id(job_id: str | None) -> int:
    """The rendezvous port of a job: the same on every rank, and different for two jobs on one node
    unless their ids (digits only) are a multiple of PORT_SPAN apart."""
    digits = re.sub(r"[^0-9]", "", job_id or "")
    return PORT_BASE + int(digits) % PORT_SPAN if digits else DEFAULT_PORT


def unique(hosts: Iterable[str]) -> tuple[str, ...]:
    """Hosts in first-seen order, each once (host files list a host once per slot)."""
    return tuple(dict.fromkeys(hosts))


def read_lines(variable: str, path: str) -> list[str]:
    """The lines of the file that `variable` names: the one place this package reads a file."""
    try:
        with open(path, encoding="utf-8") as file:
            return file.read().splitlines()
    except OSError as err:
        raise UserError(
            f"cannot read {variable}={path} ({err.strerror}): read it on the job's first node, where the "
            "scheduler writes it, or pass MASTER_ADDR to every rank"
        ) from err


def hostfile_hosts(environ: Mapping[str, str], variable: str) -> tuple[str, ...]:
    """Hosts of the host file named by `variable`, () if it is unset.

    Takes the first word of each line, without a `:slots` suffix, so one reader serves PBS node
    files, SGE's PE_HOSTFILE ("host slots queue processors"), LSF's, OpenMPI's ("host slots=4") and
    Hydra's ("host:4"); `#` starts a comment.
    """
    path = environ.get(variable, "").strip()
    return hostfile_lines_hosts(read_lines(variable, path)) if path else ()


def hostfile_lines_hosts(lines: Iterable[str]) -> tuple[str, ...]:
    """Hosts of a host file's lines: the first word of each, without `:slots`, each host once."""
    words = (line.split("#", 1)[0].split() for line in lines)
    return unique(first[0].split(":", 1)[0] for first in words if first)


def nodelist_hosts(environ: Mapping[str, str], variable: str) -> tuple[str, ...]:
    """Hosts of a Slurm-style node list ("gpu[01-04],login1") in `variable`, () if it is unset.

    Entries are split on commas and on spaces outside brackets, and spaces inside brackets are dropped,
    as Slurm's own hostlist parser does: "alpha, host[5-9] gamma" and "1.2.3.[089, 100-110]" are read
    (zero-padding kept: 1.2.3.089).
    """
    value = environ.get(variable, "").strip()
    if not value:
        return ()
    try:
        return unique(hostlist.expand_hostlist(",".join(nodelist_entries(value))))
    except hostlist.BadHostlist as err:
        raise UserError(f"{variable}={value!r} is not a node list like gpu[01-04] ({err}): let Slurm set it") from err


def nodelist_entries(value: str) -> list[str]:
    """A node list's entries, unexpanded: "a, b[1, 3-4] c" -> ["a", "b[1,3-4]", "c"]."""
    entries, entry, depth = [], "", 0
    for char in value:
        depth += {"[": 1, "]": -1}.get(char, 0)
        if depth == 0 and (char == "," or char.isspace()):
            entries += [entry] if entry else []
            entry = ""
        elif not char.isspace():
            entry += char
    return [*entries, entry] if entry else entries


def block_node_rank(rank: int, local_rank: int, local_size: int, world_size: int, title: str, fix: str) -> int:
    """The node index for a launcher that exports none: rank // local_size.

    Right when every node holds the same number of consecutive ranks (what `srun`, `mpirun
    --map-by ppr:N:node` and `mpiexec -ppn N` do). Placements that visibly break it (round-robin,
    uneven) raise; an uneven last node cannot be seen from one rank.
    """
    if world_size % local_size or rank % local_size != local_rank:
        raise UserError(
            f"cannot tell the node rank under {title}: rank {rank} is local rank {local_rank} of {local_size} "
            f"in a world of {world_size}, so nodes do not hold equal blocks of consecutive ranks: {fix}"
        )
    return rank // local_size


@dataclass(frozen=True, eq=False)
class ClusterEnvironment(ABC):
    """Where this process stands in a distributed job, as one scheduler or launcher tells it.

    Subclasses are mostly a table (`variables`) from logical names to the variables that hold them;
    they override a property only where the value is derived (a node index, a host list).
    """

    environ: Mapping[str, str]

    name: ClassVar[str]  # short id, e.g. "slurm"
    title: ClassVar[str]  # as written in messages, e.g. "Slurm"
    # Logical name (rank, local_rank, world_size, local_world_size, node_rank, job_id) -> the
    # variables holding it, the first one set wins.
    variables: ClassVar[Mapping[str, tuple[str, ...]]] = {}
    hosts_from: ClassVar[str]  # why there may be no host list, for messages
    # The batch job's own variables, set in its job script too, before any rank starts (doctor says
    # "inside a Slurm job"); () for a launcher that is no batch job.
    job_variables: ClassVar[tuple[str, ...]]
    # What starting ranks across nodes needs here, for doctor to check. No default: an environment
    # that does not say fails a test (tests/unit/cluster/test_detect.py), instead of needing mpirun.
    multi_node_tools: ClassVar[tuple[Tool, ...]]
    start_fix: ClassVar[str]  # how to start ranks so that the variables are right
    address_fix: ClassVar[str]  # how to hand MASTER_ADDR to every rank
    # The logical values that, set alone (a rank above 0, a world size above 1), say a process is
    # one of several ranks even where detect() is false: a launcher half seen (detect.rank_environment).
    several_ranks_from: ClassVar[tuple[str, ...]] = ("rank", "world_size")

    def __post_init__(self) -> None:
        object.__setattr__(self, "environ", MappingProxyType(dict(self.environ)))

    def __repr__(self) -> str:  # never the environ: it may hold tokens
        return f"{type(self).__name__}()"

    @staticmethod
    @abstractmethod
    def detect(environ: Mapping[str, str]) -> bool:
        """Whether `environ` is that of a process started by this scheduler or launcher."""

    @property
    @abstractmethod
    def hosts(self) -> tuple[str, ...]:
        """Every host of the job, in order, each once; () when this environment cannot know them."""

    @property
    def rank(self) -> int:
        return self._index("rank", self.world_size)

    @property
    def local_rank(self) -> int:
        return self._index("local_rank", self.local_world_size)

    @property
    def world_size(self) -> int:
        return self._count("world_size")

    @property
    def local_world_size(self) -> int:
        return self._count("local_world_size")

    @property
    def node_rank(self) -> int:
        return self._number("node_rank")[1]

    @property
    def job_id(self) -> str | None:
        variable = self._first_set("job_id")
        return self.environ[variable].strip() if variable else None

    @property
    def main_address(self) -> str:
        """MASTER_ADDR when set, else the first host."""
        explicit = self.environ.get("MASTER_ADDR", "").strip()
        if explicit:
            return explicit
        hosts = self.hosts
        if hosts:
            return hosts[0]
        raise UserError(
            f"cannot tell the main address under {self.title} without a host list ({self.hosts_from}): "
            f"pass it with {self.address_fix}"
        )

    @property
    def main_port(self) -> int:
        """MASTER_PORT when set, else a port derived from the job id, else DEFAULT_PORT."""
        explicit = self.environ.get("MASTER_PORT", "").strip()
        if not explicit:
            return port_from_job_id(self.job_id)
        return tcp_port("MASTER_PORT", explicit, "set it to a free TCP port, or unset it to derive one from the job id")

    def rank_env(self) -> RankEnv:
        """This process's place in the job, as the scheduler's variables give it."""
        return RankEnv(
            rank=self.rank,
            local_rank=self.local_rank,
            world_size=self.world_size,
            local_world_size=self.local_world_size,
            node_rank=self.node_rank,
            main_address=self.main_address,
            main_port=self.main_port,
        )

    def torch_env(self) -> dict[str, str]:
        """The variables torch.distributed's env:// initialisation reads, for this process."""
        return self.rank_env().variables()

    def _first_set(self, logical: str) -> str | None:
        return next((v for v in self.variables.get(logical, ()) if self.environ.get(v, "").strip()), None)

    def _number(self, logical: str) -> tuple[str, int]:
        """(variable, value) of a whole-number logical value."""
        variable = self._first_set(logical)
        if variable is None:
            names = " or ".join(self.variables.get(logical, ())) or f"the {logical.replace('_', ' ')}"
            raise UserError(f"{names} is not set under {self.title}: {self.start_fix}")
        return variable, whole_number(variable, self.environ[variable], self.start_fix)

    def _count(self, logical: str) -> int:
        variable, value = self._number(logical)
        if value < 1:
            raise UserError(f"{variable}={value} must be at least 1: {self.start_fix}")
        return value

    def _index(self, logical: str, size: int) -> int:
        variable, value = self._number(logical)
        if value >= size:
            raise UserError(f"{variable}={value} is out of range for {size} ranks: {self.start_fix}")
        return value
