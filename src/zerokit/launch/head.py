"""Head-node launchers: from one node, start the job on every host. One entry each, data in, argv out.

Each launcher gets the same HeadJob and returns the command that starts it: pdsh starts one
`launch` per host (which then starts that node's ranks), the MPI launchers start every rank at once
(each rank's `launch` then finds itself in that MPI's variables: zerokit.cluster). Adding a
launcher is one function and one entry in HEAD_LAUNCHERS, plus its tests.
"""

from __future__ import annotations

import shlex
from collections.abc import Callable, Mapping
from dataclasses import dataclass


@dataclass(frozen=True)
class HeadJob:
    hosts: tuple[str, ...]
    nproc_per_node: int
    main_address: str
    main_port: int
    ifname: str | None  # for the MPI launchers, always resolved (their own traffic needs it too)
    workdir: str
    env: Mapping[str, str]  # the head node's variables the remote ranks need (plan.forwarded_env)
    launch: tuple[str, ...]  # how to run `zerokit launch` on a host (inside the image again, if in one)
    target: tuple[str, ...]  # what every rank runs

    @property
    def world_size(self) -> int:
        return len(self.hosts) * self.nproc_per_node

    def rank_launch(self) -> list[str]:
        """What an MPI launcher starts as each rank: launch, which reads the MPI's variables."""
        return [*self.launch, *(["--ifname", self.ifname] if self.ifname else []), "--", *self.target]


@dataclass(frozen=True)
class HeadLauncher:
    argv: Callable[[HeadJob], tuple[str, ...]]
    needs_ifname: bool  # the launcher's own traffic is steered to the job's interface
    # Started inside the image, its daemons (OpenMPI's orted) reach the other hosts over the image's ssh,
    # which re-enters the image there (zerokit.launch.remote_shell): the ranks start in it as they are.
    daemons_reenter_image: bool = False


def pdsh(job: HeadJob) -> tuple[str, ...]:
    """`pdsh ... ssh %h 'cd DIR && env ... launch --hosts ... --node-host %h ... -- target'`."""
    env = " ".join(shlex.quote(f"{k}={v}") for k, v in sorted(job.env.items()))
    node = [*job.launch, "--hosts", ",".join(job.hosts), "--node-host", "%h", *_rendezvous(job)]
    if job.ifname:
        node += ["--ifname", job.ifname]
    line = f"cd {shlex.quote(job.workdir)} && env {env} {shlex.join([*node, '--', *job.target])}"
    hosts, fanout = ",".join(job.hosts), str(len(job.hosts))
    return ("pdsh", "-S", "-R", "exec", "-f", fanout, "-w", hosts, "ssh", "-o", "BatchMode=yes", "%h", line)


def openmpi(job: HeadJob) -> tuple[str, ...]:
    """OpenMPI's `mpirun`: `-x NAME=value` per variable, `--mca ..._if_include` for its own traffic."""
    ifname = job.ifname or ""
    return (
        "mpirun", "-np", str(job.world_size),
        "--host", ",".join(f"{h}:{job.nproc_per_node}" for h in job.hosts),
        "--map-by", f"ppr:{job.nproc_per_node}:node",
        "--mca", "btl_tcp_if_include", ifname, "--mca", "oob_tcp_if_include", ifname,
        "-wdir", job.workdir,
        *[word for name, value in sorted(_rank_env(job).items()) for word in ("-x", f"{name}={value}")],
        *job.rank_launch(),
    )  # fmt: skip


def hydra(job: HeadJob) -> tuple[str, ...]:
    """MPICH's and Intel MPI's `mpiexec` (Hydra): `-genv NAME value`, `-iface` for its own traffic."""
    return (
        "mpiexec", "-n", str(job.world_size), "-ppn", str(job.nproc_per_node),
        "-hosts", ",".join(job.hosts), "-iface", job.ifname or "", "-wdir", job.workdir,
        *[word for name, value in sorted(_rank_env(job).items()) for word in ("-genv", name, value)],
        *job.rank_launch(),
    )  # fmt: skip


def _rendezvous(job: HeadJob) -> list[str]:
    return ["--nproc-per-node", str(job.nproc_per_node), "--master-addr", job.main_address, "--master-port",
            str(job.main_port)]  # fmt: skip


def _rank_env(job: HeadJob) -> dict[str, str]:
    return {**job.env, "MASTER_ADDR": job.main_address, "MASTER_PORT": str(job.main_port)}


# `launch --launcher NAME`: the head-node launchers, by the command users know them by.
HEAD_LAUNCHERS: dict[str, HeadLauncher] = {
    "pdsh": HeadLauncher(pdsh, needs_ifname=False),
    "mpirun": HeadLauncher(openmpi, needs_ifname=True, daemons_reenter_image=True),
    "mpiexec": HeadLauncher(hydra, needs_ifname=True),
}
