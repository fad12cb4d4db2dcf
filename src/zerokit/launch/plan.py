"""From a launch config and the cluster environment to a plan: who runs what, with which variables.

`plan()` is pure: the scheduler's view comes in as a ClusterEnvironment, the interface lookup as a
function. The plan is what `launch --dry-run --json` prints and what tests assert;
zerokit.launch.execute carries it out. Three modes:

- exec:   this process is one rank that a scheduler or MPI launcher started (srun, mpirun, mpiexec, PBS,
          SGE, LSF, Flux, torchrun): set the torch.distributed variables and become the target. That
          launcher watches the rank and names it when a signal kills it (srun: "task 1: Aborted", mpirun:
          "process rank 1 ... exited on signal 6"); it signals the rank itself and may hand it
          descriptors (Slurm's PMI_FD), so nothing of launch stays in between.
- spawn:  this process is one node: start its K local ranks (`--nproc-per-node K`, K = 1 too: alone, or
          one node of a pdsh launch) and supervise them (zerokit.launch.watch.supervisor): launch names a rank that
          a signal killed, its node, and whether the run's outputs are complete, and exits with its status.
- remote: this is the head node: start the job on every host (zerokit.launch.head: pdsh, mpirun, mpiexec; srun
          from a Slurm job's batch step, on the job's nodes).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, field, replace

from zerokit.cluster.base import DEFAULT_PORT, ClusterEnvironment, RankEnv, port_from_job_id
from zerokit.cluster.nic import nic_env
from zerokit.cluster.slurm import allocation_hosts, allocation_job_id
from zerokit.foundations.errors import UserError
from zerokit.healthcheck.command import rank_argv
from zerokit.image.runtimes import inside
from zerokit.launch.command import Command
from zerokit.launch.config import LaunchConfig
from zerokit.launch.head import HEAD_LAUNCHERS, HeadJob, HeadLauncher
from zerokit.launch.nccl_plugin import forwarded, plugin_env
from zerokit.launch.rank.environment import deepspeed_arch_env
from zerokit.launch.rank.progress import TIMEOUT_VARIABLE
from zerokit.launch.watch.heartbeat import VARIABLE as HEARTBEAT_VARIABLE
from zerokit.launch.watch.stall import DEFAULT_STALL_TIMEOUT
from zerokit.launch.watch.supervisor import DEFAULT_STOP_GRACE

# Variables the remote launches inherit from the head node (pdsh/ssh gives them a bare login
# environment). Tokens are left out on purpose: they would show on the remote command line. TORCHINDUCTOR_ (not
# under TORCH_): torch.compile's cache folder and switches, as bench gives each compiled run its own cache.
FORWARDED_PREFIXES = (
    "ZEROKIT_", "HF_", "NCCL_", "GLOO_", "TORCH_", "TORCHINDUCTOR_", "TRANSFORMERS_", "DS_", "CUDA_", "OMP_",
)  # fmt: skip
FORWARDED_NAMES = ("PATH", "PYTHONPATH", "VIRTUAL_ENV", "LD_LIBRARY_PATH", "TRITON_CACHE_DIR")
SECRET_MARKERS = ("TOKEN", "SECRET", "PASSWORD", "KEY")
# launch's --strict-ops and --stop-grace, as the nodes' launches read them.
STRICT_OPS_VARIABLE = "ZEROKIT_STRICT_OPS"
STOP_GRACE_VARIABLE = "ZEROKIT_STOP_GRACE"
# Not forwarded: the head node's launch wraps the target in the check once, restarts the job, and starts it on
# the hosts (the nodes must not again).
HEAD_ONLY_PREFIXES = (
    "ZEROKIT_CHECK", "ZEROKIT_MAX_RESTARTS", "ZEROKIT_MIN_NODES", "ZEROKIT_LAUNCHER", "ZEROKIT_HOSTFILE",
    "ZEROKIT_NNODES", "ZEROKIT_NODE_TIMEOUT",
)  # fmt: skip


@dataclass(frozen=True, kw_only=True)
class Plan:
    mode: str  # "exec", "spawn" or "remote"
    environment: str  # the scheduler/launcher detected ("slurm", "openmpi", ...), "pdsh" or "local"
    hosts: tuple[str, ...]
    nnodes: int
    node_rank: int
    nproc_per_node: int
    world_size: int
    main_address: str
    main_port: int
    ifname: str | None
    env: dict[str, str]  # set for every command, on top of the per-rank variables
    commands: tuple[Command, ...] = field(default_factory=tuple)
    notes: tuple[str, ...] = ()  # what launch changed in the ranks' environment, said once (by rank 0's launch)
    spares: tuple[str, ...] = ()  # a head-node launch's hosts beyond --nnodes, for restarts to take

    def to_json(self) -> dict:
        return asdict(self)


def threads_per_rank(environ: Mapping[str, str], cpu_count: int, local_ranks: int) -> str:
    return environ.get("OMP_NUM_THREADS") or str(max(1, cpu_count // max(1, local_ranks)))


@dataclass(frozen=True)
class Where:
    """Where this launch stands in the job (the plan's first half, before its commands): the mode, whose hosts,
    which node of how many, how many ranks per node, the rendezvous."""

    mode: str
    environment: str
    hosts: tuple[str, ...]
    nnodes: int
    node_rank: int
    nproc: int
    main_address: str
    main_port: int
    routed: bool  # whether the interface that routes to the main address is looked up (no --ifname)
    spares: tuple[str, ...] = ()
    rank: RankEnv | None = None  # exec: the rank its scheduler started

    def plan(
        self,
        world_size: int,
        ifname: str | None,
        env: dict[str, str],
        commands: tuple[Command, ...],
        notes: tuple[str, ...] = (),
    ) -> Plan:
        """The whole plan: where this launch stands, with the commands it runs there."""
        return Plan(
            mode=self.mode,
            environment=self.environment,
            hosts=self.hosts,
            nnodes=self.nnodes,
            node_rank=self.node_rank,
            nproc_per_node=self.nproc,
            world_size=world_size,
            main_address=self.main_address,
            main_port=self.main_port,
            ifname=ifname,
            env=env,
            commands=commands,
            notes=notes,
            spares=self.spares,
        )


def plan(
    config: LaunchConfig,
    cluster: ClusterEnvironment | None,
    environ: Mapping[str, str],
    cpu_count: int,
    interface_to: Callable[[str], str],
    free_port: Callable[[], int],
    heartbeat: Callable[[tuple[str, ...]], str] | None = None,
) -> Plan:
    """The plan for this process. Raises UserError for a setup that cannot work, naming the fix.

    `heartbeat`: where the head's watch listens for the heartbeats of the given hosts' launches (host:port,
    zerokit.launch.watch.heartbeat), asked for a head-node launch that restarts its nodes one by one; None: no watch."""
    where = _where(config, cluster, environ, free_port)
    route = config.ifname or (interface_to(where.main_address) if where.routed else None)
    check_restarts(config, where)
    # Each rank runs the health check first (zerokit.healthcheck), which then execs the target if it passed.
    target = (
        config.target if config.check is None else rank_argv(config.python, replace(config.check, hosts=where.hosts))
    )
    if where.mode == "remote":
        return _remote_plan(config, where, environ, route, target, heartbeat)
    return _ranks_plan(config, where, environ, cpu_count, route, target)


def check_restarts(config: LaunchConfig, where: Where) -> None:
    """--max-restarts restarts what one launch starts, so it must be the whole job: the ranks of one node, or
    every node from the head node. One node's launch of several (srun's, or the head's pdsh's) cannot: the
    other nodes' ranks would wait for the restarted ones in a rendezvous that is gone."""
    whole_job = where.mode == "remote" or (where.mode == "spawn" and where.nnodes == 1)
    if config.max_restarts and not whole_job:
        at = f"{where.nnodes} nodes" if where.mode == "spawn" else f"{where.mode} mode under {where.environment}"
        raise UserError(
            f"--max-restarts restarts the ranks launch starts, on one node (launch --nproc-per-node K) or from the "
            f"head node (--launcher pdsh|mpirun --hostfile H, or srun in a Slurm job's batch script); this is "
            f"{at}: drop --max-restarts (and ZEROKIT_MAX_RESTARTS), or start the job from the head node"
        )
    if config.max_restarts and config.print_command:
        raise UserError(
            "--print-command prints a command that launch does not run, so nothing would restart it: drop "
            "--max-restarts (and ZEROKIT_MAX_RESTARTS), or let launch run the job"
        )
    if config.min_nodes == 1:
        return
    # --min-nodes counts the hosts a head-node launch restarts on: it needs one, with restarts, and no more than it
    # starts the job on.
    if where.mode != "remote" or not config.max_restarts:
        raise UserError(
            f"--min-nodes {config.min_nodes} is the fewest nodes a head-node launch restarts on: add --launcher "
            "pdsh|mpirun --hostfile H (or srun, in a Slurm job) --max-restarts N, or drop --min-nodes (and "
            "ZEROKIT_MIN_NODES)"
        )
    if config.min_nodes > len(where.hosts):
        source = "Slurm job" if HEAD_LAUNCHERS[config.launcher].in_allocation else "hostfile"
        raise UserError(
            f"--min-nodes {config.min_nodes} is more than the {len(where.hosts)} hosts of the {source}: lower it, "
            "or list more hosts"
        )


def _where(config, cluster, environ, free_port) -> Where:
    if config.launcher in HEAD_LAUNCHERS:
        return _head_where(config, cluster, environ)
    if config.hosts:  # one node of a head-node launch: --hosts and --node-host came from the head
        if config.node_host not in config.hosts:
            raise UserError(f"--node-host {config.node_host!r} is not in --hosts {','.join(config.hosts)}")
        # A step that a head's srun started is in Slurm's variables.
        environment = cluster.name if cluster else "pdsh"
        node_rank = config.hosts.index(config.node_host)
        main_address = config.master_addr or config.hosts[0]
        port = config.master_port or DEFAULT_PORT
        return _node_where(config, environment, config.hosts, len(config.hosts), node_rank, main_address, port)
    if cluster is None:
        main_address = config.master_addr or "127.0.0.1"
        port = config.master_port or free_port()
        return _node_where(config, "local", (), 1, 0, main_address, port)
    if config.nproc_per_node and config.nproc_per_node > 1:
        if cluster.local_world_size != 1:
            raise UserError(
                f"--nproc-per-node {config.nproc_per_node} starts the ranks of a node, but {cluster.title} started "
                f"{cluster.local_world_size} tasks on this node: start one task per node "
                "(srun --ntasks-per-node=1, mpirun --map-by ppr:1:node), or drop --nproc-per-node"
            )
        main_address = config.master_addr or cluster.main_address
        port = config.master_port or cluster.main_port
        return _node_where(config, cluster.name, cluster.hosts, cluster.world_size, cluster.rank, main_address, port)
    # exec: this process is a rank that a scheduler or launcher started.
    main_address = config.master_addr or cluster.main_address
    port = config.master_port or cluster.main_port
    return Where(
        mode="exec",
        environment=cluster.name,
        hosts=cluster.hosts,
        nnodes=max(1, cluster.world_size // cluster.local_world_size),
        node_rank=cluster.node_rank,
        nproc=cluster.local_world_size,
        main_address=main_address,
        main_port=port,
        routed=True,
        rank=replace(cluster.rank_env(), main_address=main_address, main_port=port),
    )


def _node_where(config, environment, hosts, nnodes, node_rank, main_address, port) -> Where:
    """spawn: K ranks of node `node_rank` out of `nnodes`, supervised by this launch (one rank alone too). One
    node alone talks over loopback; across nodes, over the interface that reaches the main node."""
    nproc = config.nproc_per_node or 1
    return Where("spawn", environment, hosts, nnodes, node_rank, nproc, main_address, port, routed=nnodes > 1)


def _head_where(config, cluster, environ) -> Where:
    """remote: from the head node, the job's hosts (and spares) and its rendezvous."""
    launcher = HEAD_LAUNCHERS[config.launcher]
    hosts, job_id = allocation(config, environ) if launcher.in_allocation else (config.hosts_from_file, None)
    hosts = hosts or (cluster.hosts if cluster else ())
    if not hosts:
        raise UserError(f"--launcher {config.launcher} needs the hosts: pass --hostfile FILE (one host per line)")
    hosts, spares = job_hosts(config, hosts)
    main_address = config.master_addr or hosts[0]
    port = config.master_port or port_from_job_id(job_id or (cluster.job_id if cluster else None))
    nproc = config.nproc_per_node or 1
    return Where("remote", config.launcher, hosts, len(hosts), 0, nproc, main_address, port, launcher.needs_ifname,
                 spares)  # fmt: skip


def _ranks_plan(config, where, environ, cpu_count, route, target) -> Plan:
    """exec or spawn: the ranks this launch becomes or starts, each with its variables."""
    arch_env, note = deepspeed_arch_env(environ)
    threads = threads_per_rank(environ, cpu_count, where.nproc)
    env = {**(nic_env(route) if route else {}), "OMP_NUM_THREADS": threads, **arch_env}
    env |= plugin_env(config.nccl_plugin, environ)
    if where.rank is not None:  # exec
        ranks, world_size, first = [where.rank], where.rank.world_size, where.rank.rank
    else:
        world_size, first = where.nnodes * where.nproc, where.node_rank
        ranks = [RankEnv(first * where.nproc + i, i, world_size, where.nproc, first, where.main_address,
                         where.main_port) for i in range(where.nproc)]  # fmt: skip
    commands = tuple(Command(target, {**env, **rank.variables()}) for rank in ranks)
    notes = (note,) if note and first == 0 else ()  # said once: by rank 0's launch
    return where.plan(world_size, route, env, commands, notes)


def _remote_plan(config, where, environ, route, target, heartbeat) -> Plan:
    """remote: from the head node, one `launch` per host (pdsh, srun), or every rank at once (an MPI launcher)."""
    launcher = HEAD_LAUNCHERS[config.launcher]
    # Inside the image, pdsh's command re-enters it on each host; an MPI launcher run from the image has its
    # daemons do it (its ranks then need neither the re-entry nor the host's PATH). A printed command
    # (--print-command) is the host's mpirun's to run: its ranks must enter the image themselves.
    in_image = inside(environ) is not None and launcher.daemons_reenter_image and not config.print_command
    env = forwarded_env(environ, host_path=not in_image)
    if heartbeat is not None and config.max_restarts and config.node_timeout and launcher.host_argv is not None:
        env[HEARTBEAT_VARIABLE] = heartbeat(where.hosts)  # each node's launch beats to the head's watch
    if config.stall_timeout != DEFAULT_STALL_TIMEOUT:  # the nodes' launches (or ranks) watch with the same
        env[TIMEOUT_VARIABLE] = f"{config.stall_timeout:g}"
    if config.stop_grace != DEFAULT_STOP_GRACE:  # the nodes' launches stop their ranks within the same
        env[STOP_GRACE_VARIABLE] = f"{config.stop_grace:g}"
    if config.strict_ops:  # the nodes' launches run the preflight, and refuse as this one would
        env[STRICT_OPS_VARIABLE] = "1"
    env |= forwarded(config.nccl_plugin)
    # srun's steps inherit its environment: the head's own variables are unset there.
    unset = tuple(sorted(name for name in environ if name.startswith(HEAD_ONLY_PREFIXES)))
    job = HeadJob(
        hosts=where.hosts,
        nproc_per_node=where.nproc,
        main_address=where.main_address,
        main_port=where.main_port,
        ifname=route,
        workdir=config.workdir,
        env=env,
        launch=(*([] if in_image else container_prefix(environ)), config.python, "-m", "zerokit", "launch"),
        target=target,
        unset=unset if launcher.in_allocation else (),
    )
    return where.plan(job.world_size, config.ifname, env, head_commands(launcher, job, config.max_restarts))


def job_hosts(config: LaunchConfig, hosts: tuple[str, ...]) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """The hosts a head-node job runs on, and its spares: the first --nnodes of hosts, and the rest."""
    if config.nnodes is None:
        return hosts, ()
    if config.nnodes > len(hosts):
        source = "Slurm job" if HEAD_LAUNCHERS[config.launcher].in_allocation else "hostfile"
        raise UserError(
            f"--nnodes {config.nnodes} is more than the {len(hosts)} hosts of the {source}: lower it, or list more "
            "hosts"
        )
    return hosts[: config.nnodes], hosts[config.nnodes :]


def allocation(config: LaunchConfig, environ: Mapping[str, str]) -> tuple[tuple[str, ...], str]:
    """The hosts and job id of the Slurm job this head launch runs in (--launcher srun): the job's nodes, or those
    of them the hostfile names. Raises UserError outside a job, or for a host not in it."""
    job_id, nodes = allocation_job_id(environ), allocation_hosts(environ)
    if job_id is None or not nodes:
        raise UserError(
            f"--launcher {config.launcher} starts a step per node of the Slurm job it runs in, and this runs in none "
            "(no SLURM_JOB_ID and SLURM_JOB_NODELIST): run it in a job script (scripts/slurm/train-restart.sbatch) "
            "or under salloc, or use --launcher pdsh --hostfile H"
        )
    outside = [host for host in config.hosts_from_file if host not in nodes]
    if outside:
        raise UserError(
            f"--hostfile names {', '.join(outside)}, not a node of Slurm job {job_id} ({','.join(nodes)}): list only "
            "the job's nodes, or drop --hostfile to run on all of them"
        )
    return config.hosts_from_file or nodes, job_id


def head_commands(launcher: HeadLauncher, job: HeadJob, max_restarts: int) -> tuple[Command, ...]:
    """What starts the job from the head node: one command, or one per host where restarts need to see each
    node's end (zerokit.launch.restarts.head_node) and the launcher can start them one at a time (pdsh, srun). srun
    gets the variables for the nodes in its own environment, which its steps inherit."""
    env = dict(job.env) if launcher.in_allocation else {}
    if max_restarts and launcher.host_argv is not None:
        return tuple(Command(launcher.host_argv(job, host), env, host) for host in job.hosts)
    return (Command(launcher.argv(job), env),)


def forwarded_env(environ: Mapping[str, str], host_path: bool = True) -> dict[str, str]:
    """The head node's variables that the remote launches need; never tokens or keys.

    Inside a container the search paths are the image's, and the image sets its own again on the remote
    host: the remote command gets the host's PATH instead (with `host_path`), as the runtime kept it
    (Apptainer's USER_PATH), so that ssh's bare login environment finds the runtime where this one was found.
    """
    found = inside(environ)
    names = () if found else FORWARDED_NAMES
    env = {
        name: value
        for name, value in environ.items()
        if (name in names or name.startswith(FORWARDED_PREFIXES))
        and not any(m in name for m in SECRET_MARKERS)
        and not name.startswith(HEAD_ONLY_PREFIXES)
    }
    if found and host_path and environ.get(found[0].host_path):
        env["PATH"] = environ[found[0].host_path]
    return env


def container_prefix(environ: Mapping[str, str]) -> list[str]:
    """How to re-enter this process's image on another host (zerokit.image.runtimes), [] outside one."""
    found = inside(environ)
    if found is None:
        return []
    runtime, image = found
    return runtime.argv(image, gpu=True)
