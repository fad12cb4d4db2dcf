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
          one node of a pdsh launch) and supervise them (zerokit.launch.supervisor): launch names a rank that
          a signal killed, its node, and whether the run's outputs are complete, and exits with its status.
- remote: this is the head node: start the job on every host (zerokit.launch.head: pdsh, mpirun, mpiexec).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, field, replace

from zerokit.cluster.base import DEFAULT_PORT, ClusterEnvironment, RankEnv, port_from_job_id
from zerokit.cluster.nic import nic_env
from zerokit.foundations.errors import UserError
from zerokit.healthcheck.command import rank_argv
from zerokit.image.runtimes import inside
from zerokit.launch.command import Command
from zerokit.launch.config import LaunchConfig
from zerokit.launch.head import HEAD_LAUNCHERS, HeadJob
from zerokit.launch.nccl_plugin import forwarded, plugin_env
from zerokit.launch.rank.environment import deepspeed_arch_env
from zerokit.launch.rank.progress import TIMEOUT_VARIABLE
from zerokit.launch.stall import DEFAULT_STALL_TIMEOUT

# Variables the remote launches inherit from the head node (pdsh/ssh gives them a bare login
# environment). Tokens are left out on purpose: they would show on the remote command line.
FORWARDED_PREFIXES = ("ZEROKIT_", "HF_", "NCCL_", "GLOO_", "TORCH_", "TRANSFORMERS_", "DS_", "CUDA_", "OMP_")
FORWARDED_NAMES = ("PATH", "PYTHONPATH", "VIRTUAL_ENV", "LD_LIBRARY_PATH", "TRITON_CACHE_DIR")
SECRET_MARKERS = ("TOKEN", "SECRET", "PASSWORD", "KEY")
# launch's --strict-ops, as the nodes' launches read it.
STRICT_OPS_VARIABLE = "ZEROKIT_STRICT_OPS"
# Not forwarded: the head node's launch wraps the target in the check once; the nodes must not again.
HEAD_ONLY_PREFIXES = ("ZEROKIT_CHECK",)


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

    def to_json(self) -> dict:
        return asdict(self)


def threads_per_rank(environ: Mapping[str, str], cpu_count: int, local_ranks: int) -> str:
    return environ.get("OMP_NUM_THREADS") or str(max(1, cpu_count // max(1, local_ranks)))


def plan(
    config: LaunchConfig,
    cluster: ClusterEnvironment | None,
    environ: Mapping[str, str],
    cpu_count: int,
    interface_to: Callable[[str], str],
    free_port: Callable[[], int],
) -> Plan:
    """The plan for this process. Raises UserError for a setup that cannot work, naming the fix."""
    made = _plan(config, cluster, environ, cpu_count, interface_to, free_port)
    check_restarts(config.max_restarts, made)
    if config.check is not None and config.launcher not in HEAD_LAUNCHERS:
        return _with_check(made, config)
    return made


def check_restarts(max_restarts: int, plan: Plan) -> None:
    """--max-restarts restarts the ranks one launch supervises, so they must be the whole job: on several nodes,
    the other nodes' ranks would wait for the restarted ones in a rendezvous that is gone."""
    if max_restarts and (plan.mode != "spawn" or plan.nnodes > 1):
        where = f"{plan.nnodes} nodes" if plan.mode == "spawn" else f"{plan.mode} mode under {plan.environment}"
        raise UserError(
            f"--max-restarts restarts the ranks of a job on one node (launch --nproc-per-node K on it), this is "
            f"{where}: drop --max-restarts (and ZEROKIT_MAX_RESTARTS), or run the job on one node"
        )


def _with_check(plan: Plan, config: LaunchConfig) -> Plan:
    """Each rank runs the health check (zerokit.healthcheck), which then execs its command if it passed."""
    wrap = rank_argv(config.python, replace(config.check, hosts=plan.hosts))
    return replace(plan, commands=tuple(replace(c, argv=wrap) for c in plan.commands))


def checked_target(config: LaunchConfig, hosts: tuple[str, ...]) -> tuple[str, ...]:
    """What a head-node launch starts on every rank: the target, behind the check when one is asked for."""
    return config.target if config.check is None else rank_argv(config.python, replace(config.check, hosts=hosts))


def _plan(config, cluster, environ, cpu_count, interface_to, free_port) -> Plan:
    if config.launcher in HEAD_LAUNCHERS:
        return _remote_plan(config, cluster, environ, interface_to)
    if config.hosts:  # one node of a head-node launch: --hosts and --node-host came from the head
        if config.node_host not in config.hosts:
            raise UserError(f"--node-host {config.node_host!r} is not in --hosts {','.join(config.hosts)}")
        node_rank = config.hosts.index(config.node_host)
        main_address = config.master_addr or config.hosts[0]
        port = config.master_port or DEFAULT_PORT
        return _node_plan(
            config,
            "pdsh",
            config.hosts,
            len(config.hosts),
            node_rank,
            main_address,
            port,
            environ,
            cpu_count,
            interface_to,
        )
    if cluster is None:
        main_address = config.master_addr or "127.0.0.1"
        port = config.master_port or free_port()
        return _node_plan(config, "local", (), 1, 0, main_address, port, environ, cpu_count, interface_to)
    if config.nproc_per_node and config.nproc_per_node > 1:
        if cluster.local_world_size != 1:
            raise UserError(
                f"--nproc-per-node {config.nproc_per_node} starts the ranks of a node, but {cluster.title} started "
                f"{cluster.local_world_size} tasks on this node: start one task per node "
                "(srun --ntasks-per-node=1, mpirun --map-by ppr:1:node), or drop --nproc-per-node"
            )
        main_address = config.master_addr or cluster.main_address
        port = config.master_port or cluster.main_port
        return _node_plan(
            config,
            cluster.name,
            cluster.hosts,
            cluster.world_size,
            cluster.rank,
            main_address,
            port,
            environ,
            cpu_count,
            interface_to,
        )
    return _rank_plan(config, cluster, environ, cpu_count, interface_to)


def _ifname(config: LaunchConfig, main_address: str, interface_to: Callable[[str], str]) -> str:
    return config.ifname or interface_to(main_address)


def _rank_plan(config, cluster, environ, cpu_count, interface_to) -> Plan:
    """exec: this process is a rank that a scheduler or launcher started."""
    main_address = config.master_addr or cluster.main_address
    port = config.master_port or cluster.main_port
    ifname = _ifname(config, main_address, interface_to)
    arch_env, note = deepspeed_arch_env(environ)
    threads = threads_per_rank(environ, cpu_count, cluster.local_world_size)
    env = {**nic_env(ifname), "OMP_NUM_THREADS": threads, **arch_env, **plugin_env(config.nccl_plugin, environ)}
    rank_env = replace(cluster.rank_env(), main_address=main_address, main_port=port).variables()
    nnodes = max(1, cluster.world_size // cluster.local_world_size)
    return Plan(
        mode="exec",
        environment=cluster.name,
        hosts=cluster.hosts,
        nnodes=nnodes,
        node_rank=cluster.node_rank,
        nproc_per_node=cluster.local_world_size,
        world_size=cluster.world_size,
        main_address=main_address,
        main_port=port,
        ifname=ifname,
        env=env,
        commands=(Command(config.target, {**env, **rank_env}),),
        notes=(note,) if note and cluster.rank == 0 else (),
    )


def _node_plan(
    config, environment, hosts, nnodes, node_rank, main_address, port, environ, cpu_count, interface_to
) -> Plan:
    """spawn: K ranks of node `node_rank` out of `nnodes`, supervised by this launch (one rank alone too)."""
    nproc = config.nproc_per_node or 1
    # One node alone talks over loopback; across nodes, over the interface that reaches the main node.
    ifname = config.ifname or (interface_to(main_address) if nnodes > 1 else None)
    arch_env, note = deepspeed_arch_env(environ)
    threads = threads_per_rank(environ, cpu_count, nproc)
    env = {**(nic_env(ifname) if ifname else {}), "OMP_NUM_THREADS": threads, **arch_env}
    env |= plugin_env(config.nccl_plugin, environ)
    world_size = nnodes * nproc
    ranks = (RankEnv(node_rank * nproc + i, i, world_size, nproc, node_rank, main_address, port) for i in range(nproc))
    commands = tuple(Command(config.target, {**env, **rank.variables()}) for rank in ranks)
    return Plan(
        mode="spawn",
        environment=environment,
        hosts=hosts,
        nnodes=nnodes,
        node_rank=node_rank,
        nproc_per_node=nproc,
        world_size=world_size,
        main_address=main_address,
        main_port=port,
        ifname=ifname,
        env=env,
        commands=commands,
        notes=(note,) if note and node_rank == 0 else (),
    )


def _remote_plan(config, cluster, environ, interface_to) -> Plan:
    """remote: from the head node, one `launch` per host (pdsh), or every rank at once (an MPI launcher)."""
    hosts = config.hosts_from_file or (cluster.hosts if cluster else ())
    if not hosts:
        raise UserError(f"--launcher {config.launcher} needs the hosts: pass --hostfile FILE (one host per line)")
    launcher = HEAD_LAUNCHERS[config.launcher]
    nproc = config.nproc_per_node or 1
    main_address = config.master_addr or hosts[0]
    port = config.master_port or port_from_job_id(cluster.job_id if cluster else None)
    # Inside the image, pdsh's command re-enters it on each host; an MPI launcher run from the image has its
    # daemons do it (its ranks then need neither the re-entry nor the host's PATH). A printed command
    # (--print-command) is the host's mpirun's to run: its ranks must enter the image themselves.
    in_image = inside(environ) is not None and launcher.daemons_reenter_image and not config.print_command
    env = forwarded_env(environ, host_path=not in_image)
    if config.stall_timeout != DEFAULT_STALL_TIMEOUT:  # the nodes' launches (or ranks) watch with the same
        env[TIMEOUT_VARIABLE] = f"{config.stall_timeout:g}"
    if config.strict_ops:  # the nodes' launches run the preflight, and refuse as this one would
        env[STRICT_OPS_VARIABLE] = "1"
    env |= forwarded(config.nccl_plugin)
    job = HeadJob(
        hosts=hosts,
        nproc_per_node=nproc,
        main_address=main_address,
        main_port=port,
        ifname=config.ifname or (interface_to(main_address) if launcher.needs_ifname else None),
        workdir=config.workdir,
        env=env,
        launch=(*([] if in_image else container_prefix(environ)), config.python, "-m", "zerokit", "launch"),
        target=checked_target(config, hosts),
    )
    return Plan(
        mode="remote",
        environment=config.launcher,
        hosts=hosts,
        nnodes=len(hosts),
        node_rank=0,
        nproc_per_node=nproc,
        world_size=job.world_size,
        main_address=main_address,
        main_port=port,
        ifname=config.ifname,
        env=env,
        commands=(Command(launcher.argv(job), {}),),
    )


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
