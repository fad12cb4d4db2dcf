"""The torch.distributed variables of this process: from its scheduler, or a 1-rank world; and the ranks' arch list."""

from __future__ import annotations

import socket
from collections.abc import Mapping, MutableMapping

from zerokit.cluster import ENVIRONMENTS, ClusterEnvironment
from zerokit.cluster.base import RankEnv
from zerokit.cluster.detect import rank_environment
from zerokit.foundations.errors import UserError
from zerokit.foundations.values import tcp_port
from zerokit.image.site_torch import SiteTorchError, deepspeed_arch_list

ARCH_LIST = "TORCH_CUDA_ARCH_LIST"


def free_port() -> int:
    """A TCP port free on this host now (the OS picks it)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def check_port_free(port: int, fix: str) -> None:
    """Refuse a rendezvous port that another process holds, before the ranks start and fail on it.

    Rank 0's store listens on every address with SO_REUSEADDR, and so does this test: a port that
    an earlier run left in TIME_WAIT passes, one that a process listens on does not.
    """
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind(("0.0.0.0", port))
        except OSError as err:
            raise UserError(f"port {port} cannot be used for the ranks' rendezvous ({err.strerror}): {fix}") from err


def deepspeed_arch_env(environ: Mapping[str, str]) -> tuple[dict[str, str], str | None]:
    """TORCH_CUDA_ARCH_LIST for the ranks in a form DeepSpeed 0.19.8 can JIT-compile an op with, and a note when
    that changed it. Machines that preset an arch-specific entry (H100 nodes: "9.0a"; "10.0f", "sm_90a") break
    any later JIT, which parses MAJOR.MINOR[+PTX]; the plain arch builds the same kernels. A list that is already
    such, or that cannot be read at all, is left as it is."""
    given = environ.get(ARCH_LIST, "")
    entries = [entry for entry in given.replace(" ", ";").split(";") if entry]
    if not entries:
        return {}, None
    try:
        arch_list, _ = deepspeed_arch_list(entries)
    except SiteTorchError:
        return {}, None
    if set(arch_list.split(";")) == set(entries):
        return {}, None
    note = (
        f"{ARCH_LIST}={given} is {arch_list} for the ranks: DeepSpeed 0.19.8 reads only MAJOR.MINOR[+PTX] "
        "and would fail to JIT-compile an op; arch-specific variants (9.0a) are built as the plain arch"
    )
    return {ARCH_LIST: arch_list}, note


def launch_environment(environ: Mapping[str, str], scheduler: str | None) -> ClusterEnvironment | None:
    """The environment `launch` runs in; `scheduler` (--launcher slurm, ...) must be the one found."""
    if scheduler is None:
        return rank_environment(environ)
    wanted = next(env for env in ENVIRONMENTS if env.name == scheduler)
    if not wanted.detect(environ):
        raise UserError(
            f"--launcher {scheduler} (or ZEROKIT_LAUNCHER={scheduler}) expects a rank that {wanted.title} started, "
            f"but {wanted.title}'s variables are not set here: {wanted.start_fix}; or use --launcher auto"
        )
    return wanted(environ)


def refuse_hidden_job(environ: Mapping[str, str]) -> None:
    """A rank whose container hid the job's variables must not run as a lone rank 0 of 1."""
    from zerokit.image.container import hidden_job

    if found := hidden_job(environ):
        what, fix = found
        raise UserError(f"{what}: {fix}")


def ensure_rank_env(environ: MutableMapping[str, str]) -> None:
    """Make sure RANK, WORLD_SIZE, MASTER_ADDR ... are set before torch.distributed starts.

    Under srun or mpirun without `launch` they come from the scheduler's variables; outside any
    launcher this process is rank 0 of 1 (DeepSpeed would otherwise try MPI discovery and fail
    on a missing mpi4py).
    """
    cluster = rank_environment(environ)
    if cluster is not None:
        for name, value in cluster.torch_env().items():
            environ.setdefault(name, value)
        return
    refuse_hidden_job(environ)
    explicit = environ.get("MASTER_PORT", "").strip()
    fix = "set MASTER_PORT to a free port, or unset it to pick one"
    port = tcp_port("MASTER_PORT", explicit, fix) if explicit else free_port()
    if explicit:
        check_port_free(port, fix)
    alone = RankEnv(0, 0, 1, 1, 0, environ.get("MASTER_ADDR") or "127.0.0.1", port)
    environ.update(alone.variables())
