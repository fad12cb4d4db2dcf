"""The torch.distributed variables of this process: from its scheduler, or a 1-rank world."""

from __future__ import annotations

import socket
from collections.abc import MutableMapping

from zerokit.cluster import detect_environment


def free_port() -> int:
    """A TCP port free on this host now (the OS picks it)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def ensure_rank_env(environ: MutableMapping[str, str]) -> None:
    """Make sure RANK, WORLD_SIZE, MASTER_ADDR ... are set before torch.distributed starts.

    Under srun or mpirun without `launch` they come from the scheduler's variables; outside any
    launcher this process is rank 0 of 1 (DeepSpeed would otherwise try MPI discovery and fail
    on a missing mpi4py).
    """
    cluster = detect_environment(environ)
    if cluster is not None:
        for name, value in cluster.torch_env().items():
            environ.setdefault(name, value)
        return
    environ.update({"RANK": "0", "LOCAL_RANK": "0", "WORLD_SIZE": "1", "LOCAL_WORLD_SIZE": "1"})
    environ.setdefault("MASTER_ADDR", "127.0.0.1")
    environ.setdefault("MASTER_PORT", str(free_port()))
