"""A real Grid Engine cluster (Debian's gridengine 8.1.9 on the namespace nodes): PE jobs span both nodes."""

from __future__ import annotations

import sys
from pathlib import Path

from tests.cluster.netcluster import Cluster
from tests.cluster.sge import Sge
from tests.conftest import REPO

# The suite's own interpreter and source tree: the nodes share this machine's file system.
PYTHON = sys.executable
SRC = REPO / "src"


def run_job(sge: Sge, directory: Path, body: str, slots: int = 2) -> list[str]:
    """Submit BODY as a bash job script with `-pe mpi SLOTS`, wait for it, and return its output lines."""
    script, output = directory / "job.sh", directory / "job.out"
    script.write_text("#!/bin/bash\nset -eu\n" + body)
    qsub = ["qsub", "-sync", "y", "-V", "-cwd", "-j", "y", "-o", str(output), "-pe", sge.pe, str(slots), str(script)]
    result = sge.run("node1", qsub, cwd=directory, timeout=120)
    wrote = output.read_text() if output.exists() else "(no output)"
    assert result.returncode == 0, f"the job failed: {result.stdout}{result.stderr}it wrote:\n{wrote}"
    return wrote.splitlines()


def section(lines: list[str], name: str) -> list[str]:
    start = lines.index(f"== {name}") + 1
    end = next((i for i in range(start, len(lines)) if lines[i].startswith("== ")), len(lines))
    return lines[start:end]


def test_a_pe_job_gets_both_nodes_and_reaches_the_other_one(
    cluster: Cluster, sge_cluster: Sge, cluster_tmp_path: Path
) -> None:
    mpirun = (
        "mpirun --allow-run-as-root --mca pml ob1 --mca btl tcp,self"
        f" --mca oob_tcp_if_include {cluster.subnet} --mca btl_tcp_if_include {cluster.subnet}"
    )
    detect = (
        "import os; from zerokit.cluster.detect import detect_environment as d; e = d(os.environ);"
        " print(os.uname().nodename, type(e).__name__, e.rank, ','.join(sorted(e.hosts)))"
    )
    lines = run_job(
        sge_cluster,
        cluster_tmp_path,
        'echo "== job"; echo "$JOB_ID $NSLOTS"\n'
        'echo "== pe_hostfile"; cat "$PE_HOSTFILE"\n'
        # The job script runs on the PE's master node; qrsh -inherit starts a task on the other one.
        'other=$(awk -v me="$(hostname)" \'$1 != me {print $1}\' "$PE_HOSTFILE")\n'
        'echo "== qrsh"; hostname; qrsh -inherit "$other" hostname\n'
        # OpenMPI under SGE: hosts from PE_HOSTFILE (ras gridengine), daemons started with qrsh -inherit.
        f'echo "== mpirun"; {mpirun} --mca plm_base_verbose 10 -np 2'
        " sh -c 'echo $(hostname) $OMPI_COMM_WORLD_RANK' 2>plm.log\n"
        "echo \"== plm\"; grep -o 'qrsh -inherit' plm.log | sort -u\n"
        f'echo "== detect"; {mpirun} -np 2 env PYTHONPATH={SRC} {PYTHON} -c "{detect}"\n'
        f'echo "== launch"; PYTHONPATH={SRC} {PYTHON} -m zerokit launch --launcher mpirun'
        ' --hostfile "$PE_HOSTFILE" --nproc-per-node 1 --print-command -- true\n',
    )
    job_id, nslots = section(lines, "job")[0].split()
    assert job_id.isdigit() and nslots == "2"
    hostfile = [line.split() for line in section(lines, "pe_hostfile")]
    assert sorted(host for host, *_ in hostfile) == ["node1", "node2"]
    assert all(slots == "1" and queue.startswith(f"{sge_cluster.queue}@") for _, slots, queue, _ in hostfile)
    assert sorted(section(lines, "qrsh")) == ["node1", "node2"]
    assert sorted(section(lines, "mpirun")) in (["node1 0", "node2 1"], ["node1 1", "node2 0"])
    assert section(lines, "plm") == ["qrsh -inherit"]
    detected = sorted(line.split() for line in section(lines, "detect"))
    assert [[host, env, hosts] for host, env, _, hosts in detected] == [
        ["node1", "SgeEnvironment", "node1,node2"],
        ["node2", "SgeEnvironment", "node1,node2"],
    ]
    assert sorted(rank for *_, rank, _ in detected) == ["0", "1"]
    (command,) = section(lines, "launch")
    assert "mpirun -np 2 --host " in command
    assert sorted(command.split("--host ", 1)[1].split()[0].split(",")) == ["node1:1", "node2:1"]
