"""A real multi-node cluster on this one machine, for tests: Linux network namespaces as hosts.

Each node is a network namespace (its own `eth0` on one private /24, joined to a bridge that lives in a
namespace of its own, so the host's firewall and addresses are never touched), a UTS namespace (its own
hostname) and a private mount namespace (its own /etc/hosts, /etc/ssh/ssh_config and /tmp). A holder
process keeps the namespaces alive; `Cluster.run(node, argv)` enters them with nsenter.

On the nodes run: sshd (plain `ssh nodeN` works, as pdsh and DeepSpeed's runners need), munged, slurmctld
(node1) and one `slurmd -N nodeN` per node. OpenMPI reaches nodes through a generated rsh agent that
enters the node's namespaces directly. All nodes share one filesystem and one PID namespace.

Everything lives in one run directory (under /var/tmp: each node hides the real /tmp). Teardown kills
every process inside the cluster's namespaces, then deletes them; nothing is left on the host
(ZK_CLUSTER_KEEP=1 keeps the run directory and its logs; a failed bring-up always keeps them).

    cluster = start_cluster(2)
    try:
        cluster.run("node1", ["srun", "--nodes=2", "hostname"]).stdout   # "node1\nnode2\n" in some order
        cluster.run("node1", [*cluster.mpirun_args(), "-np", "2", "hostname"])
    finally:
        cluster.teardown()
"""

from __future__ import annotations

import contextlib
import ipaddress
import os
import secrets
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from tests.conftest import run_bounded

SUBNET = "10.77.7.0/24"
IFACE = "eth0"  # the node's end of its veth pair (DeepSpeed's openmpi runner hard-codes btl_tcp_if_include eth0)
BRIDGE = "br0"
RUN_BASE = "/var/tmp"  # not /tmp: inside a node /tmp is the node's own

REQUIRED_BINARIES = (
    "ip", "nsenter", "unshare", "mount", "mountpoint", "hostname", "bash",
    "sshd", "ssh", "ssh-keygen", "pdsh",
    "munged", "slurmctld", "slurmd", "srun", "sbatch", "sinfo", "sdiag",
    "mpirun", "orted",
)  # fmt: skip

# Variables that describe the caller's own job, not this cluster's: never passed on to nodes.
FOREIGN_ENV_PREFIXES = ("SLURM_", "OMPI_", "PMIX_", "PMI_")


class ClusterError(RuntimeError):
    """The cluster could not be brought up; the message names the log to read."""


@dataclass(frozen=True)
class Node:
    name: str  # its hostname, and its Slurm node name
    ip: str
    netns: str  # `ip netns` name, under /run/netns
    dir: Path  # per-node files: tmp/ (its /tmp), sshd config, host key, Slurm spool


@dataclass
class Daemon:
    name: str
    node: str
    proc: subprocess.Popen
    log: Path


@dataclass
class Cluster:
    run_dir: Path
    nodes: tuple[Node, ...]
    bridge_netns: str
    subnet: str = SUBNET
    iface: str = IFACE
    holders: dict[str, subprocess.Popen] = field(default_factory=dict)
    daemons: list[Daemon] = field(default_factory=list)
    keep_run_dir: bool = False

    # ---- what tests read -------------------------------------------------------------------------

    @property
    def names(self) -> list[str]:
        return [n.name for n in self.nodes]

    @property
    def ips(self) -> dict[str, str]:
        return {n.name: n.ip for n in self.nodes}

    @property
    def shared_dir(self) -> Path:
        """A directory every node sees at the same path (unlike /tmp, which is per node)."""
        return self.run_dir / "shared"

    @property
    def rsh_agent(self) -> Path:
        """ssh-compatible `rsh-agent [opts] HOST CMD...` that enters HOST's namespaces, keeping the environment."""
        return self.run_dir / "rsh-agent"

    @property
    def slurm_conf(self) -> Path:
        return self.run_dir / "slurm" / "slurm.conf"

    def node(self, name: str) -> Node:
        for n in self.nodes:
            if n.name == name:
                return n
        raise KeyError(f"no node {name!r} in this cluster; nodes are {self.names}")

    def slurm_env(self) -> dict[str, str]:
        return {"SLURM_CONF": str(self.slurm_conf)}

    def env(self) -> dict[str, str]:
        """What every command on a node gets on top of the caller's environment."""
        return {
            **self.slurm_env(),
            "PDSH_RCMD_TYPE": "ssh",
            "OMPI_ALLOW_RUN_AS_ROOT": "1",
            "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1",
        }

    def mpirun_args(self, hosts: Sequence[str] | None = None, slots: int = 1) -> list[str]:
        """`mpirun` and the options that make it work across the nodes; append `-np N prog args`."""
        hosts = self.names if hosts is None else list(hosts)
        return [
            "mpirun",
            "--allow-run-as-root",
            "--mca", "plm_rsh_agent", str(self.rsh_agent),
            "--mca", "oob_tcp_if_include", self.subnet,
            "--mca", "btl_tcp_if_include", self.subnet,
            "--mca", "pml", "ob1",
            "--mca", "btl", "tcp,self",
            "--host", ",".join(f"{h}:{slots}" for h in hosts),
        ]  # fmt: skip

    # ---- running things on a node ------------------------------------------------------------------

    def enter(self, node: str, cwd: str | os.PathLike | None = None) -> list[str]:
        """The argv prefix that runs a command inside NODE (net, UTS and mount namespaces) in CWD."""
        holder = self.holders[self.node(node).name]
        return ["nsenter", "-t", str(holder.pid), "--net", "--uts", "--mount", f"--wd={cwd or os.getcwd()}", "--"]

    def node_env(self, env: Mapping[str, str] | None = None) -> dict[str, str]:
        base = {k: v for k, v in os.environ.items() if not k.startswith(FOREIGN_ENV_PREFIXES)}
        return {**base, **self.env(), **(env or {})}

    def run(
        self,
        node: str,
        argv: Sequence[str],
        *,
        env: Mapping[str, str] | None = None,
        cwd: str | os.PathLike | None = None,
        timeout: float = 60,
        input: str | None = None,
        check: bool = False,
    ) -> subprocess.CompletedProcess[str]:
        """Run ARGV on NODE and wait; text stdout/stderr captured. ENV is added to the caller's environment."""
        result = run_bounded([*self.enter(node, cwd), *argv], env=self.node_env(env), input=input, timeout=timeout)
        if check:
            result.check_returncode()
        return result

    def popen(
        self,
        node: str,
        argv: Sequence[str],
        *,
        env: Mapping[str, str] | None = None,
        cwd: str | os.PathLike | None = None,
        **popen_kwargs,
    ) -> subprocess.Popen:
        """Start ARGV on NODE without waiting; POPEN_KWARGS go to subprocess.Popen (stdout=..., text=...)."""
        return subprocess.Popen([*self.enter(node, cwd), *argv], env=self.node_env(env), **popen_kwargs)

    # ---- teardown ----------------------------------------------------------------------------------

    def teardown(self) -> None:
        """Stop every daemon and every process left in the namespaces, delete them, remove the run dir."""
        for daemon in reversed(self.daemons):
            _stop(daemon.proc)
        for netns in [n.netns for n in self.nodes] + [self.bridge_netns]:
            _kill_namespace_processes(netns)
        for proc in [d.proc for d in self.daemons] + list(self.holders.values()):
            _stop(proc)
        for netns in [n.netns for n in self.nodes] + [self.bridge_netns]:
            subprocess.run([_sbin("ip"), "netns", "delete", netns], capture_output=True)
        self.daemons.clear()
        self.holders.clear()
        if not self.keep_run_dir:
            shutil.rmtree(self.run_dir, ignore_errors=True)


# ---- bring-up ------------------------------------------------------------------------------------------


def missing_requirements() -> list[str]:
    """Why this machine cannot host a cluster (empty when it can)."""
    problems = []
    if os.geteuid() != 0:
        problems.append("needs root (network, UTS and mount namespaces)")
    missing = [b for b in REQUIRED_BINARIES if _which(b) is None]
    if missing:
        problems.append(f"missing {', '.join(missing)}: run tests/cluster/install-deps")
    return problems


def _which(name: str) -> str | None:
    """NAME's path, also looking in the sbin directories a non-login PATH may lack."""
    return shutil.which(name, path=f"{os.environ.get('PATH', '')}:/usr/sbin:/sbin")


def _sbin(name: str) -> str:
    return _which(name) or name


def start_cluster(
    n_nodes: int = 2,
    *,
    cpus: int = 2,
    subnet: str = SUBNET,
    base_dir: str | os.PathLike = RUN_BASE,
    timeout: float = 30,
) -> Cluster:
    """Bring up N_NODES nodes named node1..nodeN with sshd, munge and Slurm; tear down whatever started on error."""
    net = ipaddress.ip_network(subnet)
    run_id = secrets.token_hex(3)
    run_dir = Path(tempfile.mkdtemp(prefix=f"zk-cluster-{run_id}-", dir=base_dir))
    run_dir.chmod(0o755)  # munged wants its socket reachable by every user
    nodes = tuple(
        Node(name=f"node{i}", ip=str(net[i]), netns=f"zk-{run_id}-node{i}", dir=run_dir / "nodes" / f"node{i}")
        for i in range(1, n_nodes + 1)
    )
    cluster = Cluster(
        run_dir=run_dir,
        nodes=nodes,
        bridge_netns=f"zk-{run_id}-bridge",
        subnet=subnet,
        keep_run_dir=os.environ.get("ZK_CLUSTER_KEEP") == "1",
    )
    try:
        _write_files(cluster, cpus)
        _make_network(cluster)
        for node in nodes:
            cluster.holders[node.name] = _start_holder(cluster, node)
        _start_daemons(cluster, timeout)
    except BaseException:
        cluster.keep_run_dir = True  # keep the logs that explain the failure
        cluster.teardown()
        raise
    return cluster


def _write_files(cluster: Cluster, cpus: int) -> None:
    run = cluster.run_dir
    for sub in ("shared", "logs", "ssh", "munge", "slurm/state"):
        (run / sub).mkdir(parents=True)
    for node in cluster.nodes:
        (node.dir / "tmp").mkdir(parents=True)
        (node.dir / "tmp").chmod(0o1777)
        (node.dir / "slurmd").mkdir()
        (node.dir / "cgroup").mkdir()

    hosts = ["127.0.0.1 localhost", "::1 localhost ip6-localhost ip6-loopback"]
    hosts += [f"{n.ip} {n.name}" for n in cluster.nodes]
    (run / "hosts").write_text("\n".join(hosts) + "\n")

    _write_ssh(cluster)

    key = run / "munge" / "munge.key"
    key.write_bytes(os.urandom(1024))
    key.chmod(0o600)

    cluster.slurm_conf.write_text(_slurm_conf(cluster, cpus))

    cluster.rsh_agent.write_text(_rsh_agent(cluster))
    cluster.rsh_agent.chmod(0o755)


def _rsh_agent(cluster: Cluster) -> str:
    """`rsh-agent [ssh options] HOST COMMAND...`: COMMAND in HOST's namespaces, with the caller's environment."""
    cases = "".join(f"  {n.name}|{n.ip}) node={n.name} ;;\n" for n in cluster.nodes)
    return (
        "#!/bin/sh\n"
        "# ssh-compatible: skips ssh options, runs the remote command line with sh -c inside HOST.\n"
        "while [ $# -gt 0 ]; do\n"
        '  case "$1" in -l|-p|-o|-i|-F|-E) shift 2 ;; -*) shift ;; *) break ;; esac\n'
        "done\n"
        "host=${1#*@}; shift\n"
        'case "$host" in\n'
        f"{cases}"
        '  *) echo "rsh-agent: unknown host $host" >&2; exit 255 ;;\n'
        "esac\n"
        f'pid=$(cat "{cluster.run_dir}/nodes/$node/holder.pid")\n'
        'exec nsenter -t "$pid" --net --uts --mount --wd="${HOME:-/}" -- /bin/sh -c "$*"\n'
    )


def _write_ssh(cluster: Cluster) -> None:
    ssh = cluster.run_dir / "ssh"
    _keygen(ssh / "id_ed25519")
    (ssh / "authorized_keys").write_text((ssh / "id_ed25519.pub").read_text())
    (ssh / "ssh_config").write_text(
        "# Bind-mounted over /etc/ssh/ssh_config inside each node: plain `ssh nodeN` works.\n"
        "Host *\n"
        "    User root\n"
        f"    IdentityFile {ssh / 'id_ed25519'}\n"
        "    IdentitiesOnly yes\n"
        "    StrictHostKeyChecking no\n"
        "    UserKnownHostsFile /dev/null\n"
        "    GlobalKnownHostsFile /dev/null\n"
        "    BatchMode yes\n"
        "    ConnectTimeout 10\n"
        "    LogLevel ERROR\n"
    )
    for node in cluster.nodes:
        _keygen(node.dir / "ssh_host_ed25519_key")
        (node.dir / "sshd_config").write_text(
            f"ListenAddress {node.ip}\n"
            f"HostKey {node.dir / 'ssh_host_ed25519_key'}\n"
            f"AuthorizedKeysFile {ssh / 'authorized_keys'}\n"
            "PidFile none\n"
            "PermitRootLogin prohibit-password\n"
            "PubkeyAuthentication yes\n"
            "PasswordAuthentication no\n"
            "KbdInteractiveAuthentication no\n"
            "StrictModes no\n"
            "UsePAM no\n"
            "PrintMotd no\n"
            "PrintLastLog no\n"
            "X11Forwarding no\n"
            "Subsystem sftp internal-sftp\n"
        )


def _keygen(path: Path) -> None:
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "zk-cluster", "-f", str(path)], check=True)


def _slurm_conf(cluster: Cluster, cpus: int) -> str:
    run = cluster.run_dir
    head = cluster.nodes[0]
    lines = [
        "ClusterName=zk",
        f"SlurmctldHost={head.name}({head.ip})",
        "SlurmUser=root",
        "AuthType=auth/munge",
        "CredType=cred/munge",
        f"AuthInfo=socket={run / 'munge' / 'munge.socket'}",
        f"StateSaveLocation={run / 'slurm' / 'state'}",
        f"SlurmdSpoolDir={run / 'nodes' / '%n' / 'slurmd'}",
        f"SlurmctldPidFile={run / 'slurm' / 'slurmctld.pid'}",
        f"SlurmdPidFile={run / 'nodes' / '%n' / 'slurmd.pid'}",
        f"SlurmctldLogFile={run / 'logs' / 'slurmctld.log'}",
        f"SlurmdLogFile={run / 'logs' / '%n-slurmd.log'}",
        "TmpFS=/tmp",  # each node's own /tmp (a bind mount in its mount namespace)
        "ProctrackType=proctrack/linuxproc",
        "TaskPlugin=task/none",
        "SelectType=select/cons_tres",
        "SelectTypeParameters=CR_CPU",
        "SlurmdParameters=config_overrides",  # trust CPUs= below, not the (shared) hardware
        "MpiDefault=none",
        "ReturnToService=2",
        "AccountingStorageType=accounting_storage/none",
        "JobAcctGatherType=jobacct_gather/none",
        "JobCompType=jobcomp/none",
        "MailProg=/bin/true",
        "KillWait=5",
        "InactiveLimit=0",
        "SchedulerParameters=batch_sched_delay=0",  # start batch jobs at submission (default: up to 3 s later)
    ]
    lines += [f"NodeName={n.name} NodeAddr={n.ip} CPUs={cpus} State=UNKNOWN" for n in cluster.nodes]
    lines.append("PartitionName=debug Nodes=ALL Default=YES MaxTime=INFINITE OverSubscribe=YES State=UP")
    return "\n".join(lines) + "\n"


def _make_network(cluster: Cluster) -> None:
    """A bridge in its own namespace (so Docker's FORWARD DROP and the host never see it), one veth per node."""
    br = cluster.bridge_netns
    prefix = ipaddress.ip_network(cluster.subnet).prefixlen
    _ip("netns", "add", br)
    _ip("-n", br, "link", "add", BRIDGE, "type", "bridge")
    _ip("-n", br, "link", "set", BRIDGE, "up")
    for i, node in enumerate(cluster.nodes, start=1):
        _ip("netns", "add", node.netns)
        _ip("-n", br, "link", "add", f"veth{i}", "type", "veth", "peer", "name", cluster.iface, "netns", node.netns)
        _ip("-n", br, "link", "set", f"veth{i}", "master", BRIDGE, "up")
        _ip("-n", node.netns, "addr", "add", f"{node.ip}/{prefix}", "dev", cluster.iface)
        _ip("-n", node.netns, "link", "set", cluster.iface, "up")
        _ip("-n", node.netns, "link", "set", "lo", "up")


def _ip(*args: str) -> None:
    result = subprocess.run([_sbin("ip"), *args], capture_output=True, text=True)
    if result.returncode != 0:
        raise ClusterError(f"`ip {shlex.join(args)}` failed: {result.stderr.strip()}")


def _kept_under_tmp() -> list[Path]:
    """Paths under /tmp that every node must still see: this checkout, the Python running the tests and the
    folder of $ZEROKIT_TEST_SIF (a CI clone may live in /tmp, which each node replaces with its own)."""
    seen = {Path(__file__).resolve().parents[2], Path(sys.prefix).resolve()}
    if sif := os.environ.get("ZEROKIT_TEST_SIF"):
        seen.add(Path(sif).resolve().parent)
    under_tmp = [p for p in sorted(seen) if p.is_relative_to("/tmp") and p != Path("/tmp")]
    return [p for p in under_tmp if not any(p != q and p.is_relative_to(q) for q in under_tmp)]


def _start_holder(cluster: Cluster, node: Node) -> subprocess.Popen:
    """A `sleep` inside the node's net namespace, with a new UTS and mount namespace set up as the node's."""
    run = cluster.run_dir
    kept = [shlex.quote(str(p)) for p in _kept_under_tmp()]
    stash = [node.dir / f"kept-{i}" for i in range(len(kept))]
    for folder in stash:
        folder.mkdir(exist_ok=True)
    pairs = list(zip(kept, stash, strict=True))
    setup = " && ".join(
        [
            f"hostname {node.name}",
            f"mount --bind {run / 'hosts'} /etc/hosts",
            f"mount --bind {run / 'ssh' / 'ssh_config'} /etc/ssh/ssh_config",
            # The node's own /tmp, with the kept paths moved back in at their places.
            *[f"mount --bind {path} {place}" for path, place in pairs],
            f"mount --bind {node.dir / 'tmp'} /tmp",
            *[f"mkdir -p {path} && mount --move {place} {path}" for path, place in pairs],
            # A fresh sysfs, so /sys/class/net shows the node's interfaces; the host's cgroups stay (slurmd needs them).
            f"if mountpoint -q /sys/fs/cgroup; then mount --rbind /sys/fs/cgroup {node.dir / 'cgroup'}; fi",
            "mount -t sysfs sysfs /sys",
            f"if mountpoint -q {node.dir / 'cgroup'}; then mount --move {node.dir / 'cgroup'} /sys/fs/cgroup; fi",
            "echo ready",
            "exec sleep infinity >/dev/null",
        ]
    )
    argv = ["nsenter", f"--net=/run/netns/{node.netns}", "unshare", "--uts", "--mount", "--propagation", "private"]
    proc = subprocess.Popen(
        [*argv, "sh", "-c", setup],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    line = proc.stdout.readline()
    if line.strip() != "ready":
        proc.kill()
        raise ClusterError(f"could not set up namespaces of {node.name}: {line}{proc.stderr.read()}")
    proc.stdout.close()
    proc.stderr.close()
    (node.dir / "holder.pid").write_text(str(proc.pid))  # read by the rsh agent
    return proc


def _start_daemons(cluster: Cluster, timeout: float) -> None:
    run = cluster.run_dir
    head = cluster.nodes[0].name
    munge = run / "munge"
    _daemon(cluster, "munged", head, [
        _sbin("munged"), "--foreground", "--force",
        f"--socket={munge / 'munge.socket'}", f"--key-file={munge / 'munge.key'}",
        f"--pid-file={munge / 'munged.pid'}", f"--seed-file={munge / 'munged.seed'}",
        f"--log-file={run / 'logs' / 'munged.log'}",
    ])  # fmt: skip
    Path("/run/sshd").mkdir(mode=0o755, exist_ok=True)  # sshd's privilege-separation dir, as the package expects
    for node in cluster.nodes:
        _node_daemon(cluster, node, "sshd")
    _wait_for(lambda: (munge / "munge.socket").exists(), timeout, cluster, "munge socket")
    _daemon(cluster, "slurmctld", head, [_sbin("slurmctld"), "-D", "-f", str(cluster.slurm_conf)])
    for node in cluster.nodes:
        _node_daemon(cluster, node, "slurmd")
    for daemon in cluster.daemons:
        if daemon.name == "sshd":
            _wait_for(lambda d=daemon: "Server listening" in d.log.read_text(), timeout, cluster, "sshd listening")
    _wait_for(lambda: _slurm_idle(cluster), timeout, cluster, "idle Slurm nodes")
    # slurmctld's first scheduling pass comes about 3 s after it starts; a batch job submitted before waits
    # for it, and `sbatch --wait` (which polls at 2 s, then 10 s) would take 10 s instead of 2.
    _wait_for(lambda: _slurm_scheduled_once(cluster), timeout, cluster, "a first Slurm scheduling pass")


def _node_daemon(cluster: Cluster, node: Node, name: str) -> Daemon:
    """Start one of a node's own daemons, sshd or slurmd."""
    if name == "sshd":
        argv = [_sbin("sshd"), "-D", "-e", "-f", str(node.dir / "sshd_config")]
    else:
        argv = [_sbin("slurmd"), "-D", "-N", node.name, "-f", str(cluster.slurm_conf)]
    _daemon(cluster, name, node.name, argv)
    return cluster.daemons[-1]


def _daemon(cluster: Cluster, name: str, node: str, argv: list[str]) -> None:
    log = cluster.run_dir / "logs" / f"{node}-{name}.out"
    with log.open("w") as out:
        proc = subprocess.Popen(
            [*cluster.enter(node, cwd="/"), *argv],
            env=cluster.node_env(),
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    cluster.daemons.append(Daemon(name=name, node=node, proc=proc, log=log))


def _slurm_idle(cluster: Cluster) -> bool:
    result = cluster.run(cluster.nodes[0].name, ["sinfo", "--noheader", "--Node", "--format=%N %T"], timeout=10)
    if result.returncode != 0:
        return False  # slurmctld not answering yet
    states = dict(line.split(maxsplit=1) for line in result.stdout.splitlines() if " " in line)
    return all(states.get(n) == "idle" for n in cluster.names)


def _slurm_scheduled_once(cluster: Cluster) -> bool:
    result = cluster.run(cluster.nodes[0].name, ["sdiag"], timeout=10)
    cycles = [line.split(":")[1] for line in result.stdout.splitlines() if line.strip().startswith("Total cycles:")]
    return result.returncode == 0 and bool(cycles) and int(cycles[0]) > 0


def _wait_for(ready, timeout: float, cluster: Cluster, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not ready():
        dead = [d for d in cluster.daemons if d.proc.poll() is not None]
        if dead:
            d = dead[0]
            raise ClusterError(f"{d.name} on {d.node} exited ({d.proc.returncode}) before {what}; see {d.log}")
        if time.monotonic() > deadline:
            raise ClusterError(f"no {what} after {timeout:.0f} s; see the logs in {cluster.run_dir / 'logs'}")
        time.sleep(0.1)


# ---- a node's failure, for fault tests --------------------------------------------------------------------


# What a node's daemon writes once it serves (start_again waits for it).
READY = {"sshd": "Server listening", "slurmd": "slurmd started on"}


def kill_node(cluster: Cluster, name: str, daemons: tuple[str, ...] = ("sshd",)) -> list[str]:
    """SIGKILL every process of node NAME but what keeps it a node of this cluster for the tests after (its
    namespace holder, its daemons not named in DAEMONS): a job's processes, and its sshd (so that it no longer
    answers ssh, as a node that died), its slurmd too where named (Slurm then starts no step there). The command
    lines killed; `start_again` brings each daemon back."""
    node = cluster.node(name)
    own = {d.proc.pid for d in cluster.daemons if d.node == name and d.name not in daemons}
    kept = {cluster.holders[name].pid, *own}
    killed = []
    for pid in _pids_in_netns(os.stat(f"/run/netns/{node.netns}").st_ino):
        if pid in kept:
            continue
        with contextlib.suppress(OSError):
            killed.append(Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode().strip())
            os.kill(pid, signal.SIGKILL)
    return killed


def start_again(cluster: Cluster, name: str, daemons: tuple[str, ...] = ("sshd",), timeout: float = 30) -> None:
    """Start node NAME's DAEMONS (sshd, slurmd) again, after kill_node, and wait until they serve."""
    cluster.daemons[:] = [d for d in cluster.daemons if not (d.node == name and d.name in daemons)]
    for daemon in daemons:
        started = _node_daemon(cluster, cluster.node(name), daemon)
        _wait_for(lambda d=started: READY[d.name] in d.log.read_text(), timeout, cluster, f"{daemon} serving on {name}")


def cut_off(cluster: Cluster, name: str) -> None:
    """Cut node NAME off the network, as a pulled cable: its veth's end on the bridge goes down. The node's own
    eth0 stays up and its processes live on; what they send is lost, and nothing reaches them (`reconnect`)."""
    _link(cluster, name, "down")


def reconnect(cluster: Cluster, name: str) -> None:
    """Plug node NAME's cable back in after cut_off: its veth's end on the bridge comes up again."""
    _link(cluster, name, "up")


def _link(cluster: Cluster, name: str, state: str) -> None:
    """Set the bridge side of node NAME's veth (veth1 for node1, ..., as _make_network named them) up or down."""
    index = cluster.nodes.index(cluster.node(name)) + 1
    _ip("-n", cluster.bridge_netns, "link", "set", f"veth{index}", state)


# ---- teardown helpers -----------------------------------------------------------------------------------


def _stop(proc: subprocess.Popen, grace: float = 5) -> None:
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(grace)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def _kill_namespace_processes(netns: str, grace: float = 5) -> None:
    """SIGKILL every process whose network namespace is NETNS: only this cluster's processes can be there."""
    try:
        inode = os.stat(f"/run/netns/{netns}").st_ino
    except FileNotFoundError:
        return
    deadline = time.monotonic() + grace
    while pids := _pids_in_netns(inode):
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        if time.monotonic() > deadline:
            break
        time.sleep(0.05)


def _pids_in_netns(inode: int) -> list[int]:
    pids = []
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            if os.readlink(f"/proc/{entry.name}/ns/net") == f"net:[{inode}]":
                pids.append(int(entry.name))
        except OSError:
            continue
    return pids
