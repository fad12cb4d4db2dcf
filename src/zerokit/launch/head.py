"""Head-node launchers: from one node, start the job on every host. One entry each, data in, argv out.

Each launcher gets the same HeadJob and returns the command that starts it: pdsh starts one
`launch` per host (which then starts that node's ranks), the MPI launchers start every rank at once
(each rank's `launch` then finds itself in that MPI's variables: zerokit.cluster), and srun, from the batch
step of a Slurm job, starts one task per node in a step of the job (one step per node with restarts). Adding a
launcher is one function and one entry in HEAD_LAUNCHERS, plus its tests.

A node's `launch` under pdsh stops its ranks when its stdin closes (`--stop-when-stdin-closes`): pdsh's exec
module hands ssh one end of a socket pair that it never writes to and closes only when it ends, so the remote
stdin reads end-of-file once the head's pdsh is gone (stopped, killed, or its node dead), and the ranks no
longer train on unsupervised. ssh's keepalives end a connection to a node that stopped answering (SSH_OPTIONS:
3 unanswered probes 10 s apart) with ssh's 255.

A step that srun started inherits srun's whole environment, the head's own settings too: its launch is given
the variables that are the head's alone unset (HeadJob.unset: `env -u`), or it would restart or check the job
again, or start it again as a head. Slurm ends a step's tasks when its srun is stopped (srun forwards
SIGTERM as SIGKILL), and each step, of one task on one node, ends alone (`--kill-on-bad-exit=0`): so the head
sees which node's end it was.
"""

from __future__ import annotations

import shlex
from collections.abc import Callable, Mapping
from dataclasses import dataclass

# ssh's options for pdsh's connections: no prompt, and the end of a connection to a node that stopped answering.
SSH_OPTIONS = ("-o", "BatchMode=yes", "-o", "ServerAliveInterval=10", "-o", "ServerAliveCountMax=3")


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
    unset: tuple[str, ...] = ()  # the head's own variables set here, for a launcher whose steps inherit them (srun)

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
    # One host's share of the job, for a launcher that can start the hosts one at a time: under
    # `--max-restarts`, one command per host, so that launch sees which node's launch ended, and when.
    host_argv: Callable[[HeadJob, str], tuple[str, ...]] | None = None
    # srun's: the hosts are the Slurm job's that this runs in (SLURM_JOB_NODELIST, unless a hostfile names some of
    # them), and its steps inherit srun's environment, where HeadJob.env is set (plan.head_commands).
    in_allocation: bool = False


def pdsh(job: HeadJob) -> tuple[str, ...]:
    """`pdsh ... ssh %h 'cd DIR && env ... launch --hosts ... --node-host %h ... -- target'` on every host."""
    return pdsh_on(job, job.hosts)


def pdsh_to(job: HeadJob, host: str) -> tuple[str, ...]:
    """The same pdsh, on one host of the job."""
    return pdsh_on(job, (host,))


def pdsh_on(job: HeadJob, hosts: tuple[str, ...]) -> tuple[str, ...]:
    env = " ".join(shlex.quote(f"{k}={v}") for k, v in sorted(job.env.items()))
    node = [*job.launch, "--hosts", ",".join(job.hosts), "--node-host", "%h", "--stop-when-stdin-closes"]
    node += _rendezvous(job)
    if job.ifname:
        node += ["--ifname", job.ifname]
    line = f"cd {shlex.quote(job.workdir)} && env {env} {shlex.join([*node, '--', *job.target])}"
    fanout = str(len(hosts))
    return ("pdsh", "-S", "-R", "exec", "-f", fanout, "-w", ",".join(hosts), "ssh", *SSH_OPTIONS, "%h", line)


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


def srun(job: HeadJob) -> tuple[str, ...]:
    """One step of a task per host, each a node's launch that finds its node in the step's variables; a failed
    task ends the step (`--kill-on-bad-exit=1`), as the job scripts' srun does."""
    count = str(len(job.hosts))
    step = ("srun", "--nodes", count, "--ntasks", count, "--ntasks-per-node", "1", "--nodelist", ",".join(job.hosts))
    return (*step, "--kill-on-bad-exit=1", *_step_launch(job, ()))


def srun_to(job: HeadJob, host: str) -> tuple[str, ...]:
    """A step of one task on one host of the job: `srun --nodes 1 --ntasks 1 --nodelist HOST ... launch --hosts ...
    --node-host HOST ... -- target`."""
    step = ("srun", "--nodes", "1", "--ntasks", "1", "--nodelist", host, "--kill-on-bad-exit=0")
    return (*step, *_step_launch(job, ("--hosts", ",".join(job.hosts), "--node-host", host)))


def _step_launch(job: HeadJob, where: tuple[str, ...]) -> tuple[str, ...]:
    """`env -u HEAD_ONLY... launch WHERE --nproc-per-node ... -- target`: a node's launch in a step."""
    unset = [word for name in job.unset for word in ("-u", name)]
    node = [*job.launch, *where, *_rendezvous(job), *(["--ifname", job.ifname] if job.ifname else [])]
    return ("env", *unset, *node, "--", *job.target)


def _rendezvous(job: HeadJob) -> list[str]:
    return ["--nproc-per-node", str(job.nproc_per_node), "--master-addr", job.main_address, "--master-port",
            str(job.main_port)]  # fmt: skip


def _rank_env(job: HeadJob) -> dict[str, str]:
    return {**job.env, "MASTER_ADDR": job.main_address, "MASTER_PORT": str(job.main_port)}


# `launch --launcher NAME`: the head-node launchers, by the command users know them by.
HEAD_LAUNCHERS: dict[str, HeadLauncher] = {
    "pdsh": HeadLauncher(pdsh, needs_ifname=False, host_argv=pdsh_to),
    "mpirun": HeadLauncher(openmpi, needs_ifname=True, daemons_reenter_image=True),
    "mpiexec": HeadLauncher(hydra, needs_ifname=True),
    "srun": HeadLauncher(srun, needs_ifname=False, host_argv=srun_to, in_allocation=True),
}
