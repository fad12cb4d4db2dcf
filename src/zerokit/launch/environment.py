"""The torch.distributed environment of this process: detect a launcher, or make a 1-rank one."""

from __future__ import annotations

import socket
from collections.abc import Mapping, MutableMapping

# Set by torchrun, `launch` and DeepSpeed's launcher (RANK), or by OpenMPI's mpirun, which
# accelerate reads itself (OMPI_COMM_WORLD_RANK).
RANK_VARIABLES = ("RANK", "OMPI_COMM_WORLD_RANK")


def in_distributed_job(environ: Mapping[str, str]) -> bool:
    return any(name in environ for name in RANK_VARIABLES)


def free_port() -> int:
    """A TCP port free on this host now (the OS picks it)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def ensure_single_process_env(environ: MutableMapping[str, str]) -> None:
    """Outside any launcher, make this process rank 0 of 1.

    DeepSpeed otherwise falls back to MPI discovery and fails on a missing mpi4py.
    """
    if in_distributed_job(environ):
        return
    environ.update({"RANK": "0", "LOCAL_RANK": "0", "WORLD_SIZE": "1", "LOCAL_WORLD_SIZE": "1"})
    environ.setdefault("MASTER_ADDR", "127.0.0.1")
    environ.setdefault("MASTER_PORT", str(free_port()))
