"""Son of Grid Engine (Debian 12's gridengine 8.1.9) on a namespace cluster (see netcluster.py).

`start_sge(cluster)` makes an SGE cell of the cluster's own under its run directory (SGE_ROOT; classic
spooling, so no Berkeley DB; admin user none, so the daemons run as root), starts sge_qmaster on the first
node and one sge_execd per node, and configures them: every node an admin, submit and execution host, a
queue `all.q` over all nodes and a parallel environment `mpi` with tight integration (control_slaves TRUE,
so `qrsh -inherit` and OpenMPI's gridengine launcher reach the other nodes). The packages' own cell
(/var/lib/gridengine) is never read or written.

The daemons stay in the foreground (SGE_ND) and join `cluster.daemons`; `stop_sge` stops them (and the
processes of jobs), `cluster.teardown()` kills them with everything else in the nodes' namespaces. Ports
are SGE's usual 6444/6445: every node has its own network namespace, so they collide with nothing.

    cluster = start_cluster(2)
    sge = start_sge(cluster)   # about 0.6 s
    sge.run("node1", ["qsub", "-sync", "y", "-pe", "mpi", "2", "job.sh"])   # cluster.run with SGE_ROOT etc.
    stop_sge(sge)
"""

from __future__ import annotations

import contextlib
import os
import shlex
import shutil
import signal
import subprocess
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from tests.cluster.netcluster import Cluster, ClusterError, Daemon, _stop, _wait_for

LIB = Path("/usr/lib/gridengine")  # the real programs (/usr/bin/q* and /usr/sbin/sge_* are wrappers)
SHARE = Path("/usr/share/gridengine")
REQUIRED = ("sge_qmaster", "sge_execd", "sge_shepherd", "qconf", "qsub", "qstat", "qrsh", "spooldefaults")
DAEMONS = ("sge_qmaster", "sge_execd")
QMASTER_PORT = 6444
EXECD_PORT = 6445

# Global configuration: the package's defaults (/usr/share/gridengine/default-configuration) with these.
CONFIGURATION = {
    "mailer": "/bin/true",
    "min_uid": "0",  # the tests submit as root
    "min_gid": "0",
    "load_report_time": "00:00:05",
    "loglevel": "log_info",
}
# Scheduler: run 1 s after a submission or a job's end; the default 15 s interval would hold every job that long.
SCHEDULER = {
    "schedule_interval": "0:0:1",
    "flush_submit_sec": "1",
    "flush_finish_sec": "1",
    "queue_sort_method": "seqno",
    "job_load_adjustments": "NONE",
    "load_adjustment_decay_time": "0:0:0",
}


@dataclass(frozen=True)
class Sge:
    cluster: Cluster
    root: Path  # SGE_ROOT
    arch: str  # SGE's name of this platform, as util/arch says: lx-amd64
    cell: str = "default"
    queue: str = "all.q"
    pe: str = "mpi"

    @property
    def common(self) -> Path:
        return self.root / self.cell / "common"

    @property
    def conf_dir(self) -> Path:
        """The files start_sge fed to spooldefaults and qconf."""
        return self.root / "zk-conf"

    @property
    def spool(self) -> Path:
        return self.root / self.cell / "spool"

    def env(self) -> dict[str, str]:
        """What SGE's commands need on a node: `cluster.run(node, ["qsub", ...], env=sge.env())`."""
        return {
            "SGE_ROOT": str(self.root),
            "SGE_CELL": self.cell,
            "SGE_ARCH": self.arch,
            "SGE_QMASTER_PORT": str(QMASTER_PORT),
            "SGE_EXECD_PORT": str(EXECD_PORT),
        }

    def run(self, node: str, argv: Sequence[str], **kwargs) -> subprocess.CompletedProcess[str]:
        """`cluster.run` with SGE's environment: `sge.run("node1", ["qsub", "-sync", "y", ...])`."""
        env = {**self.env(), **kwargs.pop("env", {})}
        return self.cluster.run(node, argv, env=env, **kwargs)


def missing_sge() -> list[str]:
    """Why SGE cannot run here (empty when it can)."""
    missing = [str(LIB / name) for name in REQUIRED if not (LIB / name).exists()]
    missing += [str(path) for path in (SHARE / "util" / "arch", SHARE / "default-configuration") if not path.exists()]
    if missing:
        return [f"gridengine is not installed (no {', '.join(missing)}): run tests/cluster/install-deps"]
    return []


def start_sge(cluster: Cluster, *, slots: int = 1, timeout: float = 30) -> Sge:
    """SGE on CLUSTER's nodes: qmaster on the first, an execd on each, SLOTS slots per node in the queue."""
    arch = subprocess.run([SHARE / "util" / "arch"], capture_output=True, text=True, check=True).stdout.strip()
    sge = Sge(cluster=cluster, root=cluster.run_dir / "sge", arch=arch)
    try:
        _write_cell(cluster, sge)
        _daemon(cluster, sge, "sge_qmaster", cluster.nodes[0].name)
        _wait_for(lambda: _qconf(cluster, sge, ["-sh"]).returncode == 0, timeout, cluster, "sge_qmaster answering")
        _configure(cluster, sge, slots)
        for node in cluster.nodes:
            _daemon(cluster, sge, "sge_execd", node.name)
        _wait_for(lambda: _queue_up(cluster, sge), timeout, cluster, f"every instance of {sge.queue} up")
    except BaseException:
        cluster.keep_run_dir = True  # keep the logs (and SGE's messages files under the spool) that explain it
        stop_sge(sge)
        raise
    return sge


def stop_sge(sge: Sge) -> None:
    """Stop SGE's daemons (the cluster and its other daemons stay up) and the processes of its jobs."""
    cluster = sge.cluster
    ours = [d for d in cluster.daemons if d.name in DAEMONS]
    for daemon in reversed(ours):  # the execds first (SIGTERM: about 1 s), then the qmaster
        if daemon.name == "sge_qmaster" and daemon.proc.poll() is None:
            daemon.proc.kill()  # its orderly shutdown (SIGTERM, qconf -km) takes 10 s; its spool is thrown away
        _stop(daemon.proc)
        cluster.daemons.remove(daemon)
    _kill_processes_under(sge.root)
    if not cluster.keep_run_dir:
        shutil.rmtree(sge.root, ignore_errors=True)


def _write_cell(cluster: Cluster, sge: Sge) -> None:
    """SGE_ROOT with the cell's bootstrap files and a spool initialised as the package's init_cluster does."""
    for sub in (sge.common, sge.spool / "qmaster", sge.spool / "execd", sge.conf_dir):
        sub.mkdir(parents=True)
    (sge.root / "util").symlink_to(SHARE / "util")  # util/arch, which qrsh and the job environment use
    for sub in ("bin", "lib", "utilbin"):
        (sge.root / sub).mkdir()
        (sge.root / sub / sge.arch).symlink_to(LIB)  # OpenMPI runs $SGE_ROOT/bin/$ARC/qrsh
    (sge.common / "bootstrap").write_text(
        "admin_user              none\n"
        "default_domain          none\n"
        "ignore_fqdn             true\n"
        "spooling_method         classic\n"
        "spooling_lib            libspoolc\n"
        f"spooling_params         {sge.common};{sge.spool / 'qmaster'}\n"
        f"binary_path             {LIB}\n"
        f"qmaster_spool_dir       {sge.spool / 'qmaster'}\n"
        "security_mode           none\n"
        "listener_threads        2\n"
        "worker_threads          2\n"
        "scheduler_threads       1\n"
    )
    (sge.common / "act_qmaster").write_text(cluster.nodes[0].name + "\n")
    (sge.common / "cluster_name").write_text("zk\n")

    conf_dir = sge.conf_dir
    values = {**CONFIGURATION, "execd_spool_dir": str(sge.spool / "execd")}
    lines = []
    for line in (SHARE / "default-configuration").read_text().splitlines():
        key = line.split(maxsplit=1)[0] if line.strip() and not line.startswith("#") else ""
        lines.append(f"{key} {values[key]}" if key in values else line)
    (conf_dir / "configuration").write_text("\n".join(lines) + "\n")
    resources = SHARE / "util" / "resources"
    for what, source in (
        ("configuration", conf_dir / "configuration"),
        ("complexes", resources / "centry"),
        ("usersets", resources / "usersets"),
        ("managers", "root"),
    ):
        _check(cluster.run(cluster.nodes[0].name, [str(LIB / "spooldefaults"), what, str(source)], env=sge.env()))


def _configure(cluster: Cluster, sge: Sge, slots: int) -> None:
    hosts = cluster.names
    conf_dir = sge.conf_dir
    if hosts[1:]:
        _check(_qconf(cluster, sge, ["-ah", ",".join(hosts[1:])]))  # the qmaster's host is an admin host already
    _check(_qconf(cluster, sge, ["-as", ",".join(hosts)]))
    for host in hosts:
        exechost = conf_dir / f"exechost-{host}"
        exechost.write_text(
            f"hostname {host}\n"
            + "".join(f"{key} NONE\n" for key in ("load_scaling", "complex_values", "user_lists", "xuser_lists"))
            + "".join(f"{key} NONE\n" for key in ("projects", "xprojects", "usage_scaling", "report_variables"))
        )
        _check(_qconf(cluster, sge, ["-Ae", str(exechost)]))
    pe = conf_dir / f"pe-{sge.pe}"
    pe.write_text(
        f"pe_name {sge.pe}\n"
        "slots 9999\n"
        "user_lists NONE\n"
        "xuser_lists NONE\n"
        "start_proc_args NONE\n"
        "stop_proc_args NONE\n"
        "allocation_rule $round_robin\n"  # -pe mpi N: one slot per node in turn
        "control_slaves TRUE\n"
        "job_is_first_task FALSE\n"
        "urgency_slots min\n"
        "accounting_summary FALSE\n"
        "qsort_args NONE\n"
    )
    _check(_qconf(cluster, sge, ["-Ap", str(pe)]))
    queue = {
        "hostlist": " ".join(hosts),
        "slots": str(slots),
        "pe_list": sge.pe,
        "load_thresholds": "NONE",  # a busy test machine must not put the queue in alarm state
        "shell": "/bin/sh",
        "shell_start_mode": "unix_behavior",  # the script's #! line decides, as under Slurm
    }
    _qconf_edit(cluster, sge, ["-aq", sge.queue], queue)
    _qconf_edit(cluster, sge, ["-msconf"], SCHEDULER)


def _qconf(
    cluster: Cluster, sge: Sge, args: Sequence[str], env: Mapping[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    return cluster.run(cluster.nodes[0].name, [str(LIB / "qconf"), *args], env={**sge.env(), **(env or {})})


def _qconf_edit(cluster: Cluster, sge: Sge, args: Sequence[str], values: Mapping[str, str]) -> None:
    """`qconf ARGS` for those that open $EDITOR on a template (-aq, -msconf): sets VALUES in it."""
    editor = sge.conf_dir / "editor"
    edits = " ".join(f"-e {shlex.quote(f's|^{key}[[:space:]].*|{key} {value}|')}" for key, value in values.items())
    editor.write_text(f'#!/bin/sh\nexec sed -i {edits} "$1"\n')
    editor.chmod(0o755)
    _check(_qconf(cluster, sge, args, env={"EDITOR": str(editor)}))


def _check(result: subprocess.CompletedProcess[str]) -> None:
    if result.returncode != 0:
        said = (result.stdout + result.stderr).strip()
        raise ClusterError(f"`{shlex.join(map(str, result.args[-4:]))}` exited {result.returncode}: {said}")


def _daemon(cluster: Cluster, sge: Sge, name: str, node: str) -> None:
    log = cluster.run_dir / "logs" / f"{node}-{name}.out"
    with log.open("w") as out:
        proc = subprocess.Popen(
            [*cluster.enter(node, cwd="/"), str(LIB / name)],
            env=cluster.node_env({**sge.env(), "SGE_ND": "1"}),  # SGE_ND: stay in the foreground
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    cluster.daemons.append(Daemon(name=name, node=node, proc=proc, log=log))


def _queue_up(cluster: Cluster, sge: Sge) -> bool:
    """Every node's instance of the queue listed, and none in a state (`u`: its execd has not reported)."""
    result = cluster.run(cluster.nodes[0].name, [str(LIB / "qstat"), "-f", "-q", sge.queue], env=sge.env())
    states = {}
    for line in result.stdout.splitlines():
        fields = line.split()
        if fields and fields[0].startswith(f"{sge.queue}@"):
            states[fields[0].split("@", 1)[1]] = fields[5:]
    return result.returncode == 0 and sorted(states) == sorted(cluster.names) and not any(states.values())


def _kill_processes_under(root: Path) -> None:
    """SIGKILL what SGE started for jobs (shepherds, job scripts): every process with this cell's SGE_ROOT."""
    mark = f"SGE_ROOT={root}".encode()
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            environ = Path(f"/proc/{entry.name}/environ").read_bytes().split(b"\0")
        except OSError:
            continue
        if mark in environ:
            with contextlib.suppress(ProcessLookupError):
                os.kill(int(entry.name), signal.SIGKILL)
