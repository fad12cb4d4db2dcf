"""Fixtures for tests on a real multi-node cluster made of network namespaces (see netcluster.py)."""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.cluster.netcluster import Cluster, missing_requirements, start_cluster
from tests.cluster.sge import Sge, missing_sge, start_sge, stop_sge


@pytest.fixture(scope="session")
def cluster() -> Iterator[Cluster]:
    """A running 2-node cluster (node1, node2) with sshd, Slurm and OpenMPI; torn down after the session."""
    yield from running_cluster(2, missing_requirements())


@pytest.fixture(scope="session")
def cluster3() -> Iterator[Cluster]:
    """A running 3-node cluster (node1, node2, node3), for the health check's and a node fault's tests; `tc` and
    `iptables` act on one node's own `eth0`."""
    yield from running_cluster(3, missing_for_three())


@pytest.fixture
def fresh_cluster3() -> Iterator[Cluster]:
    """A 3-node cluster of its own, for one test, torn down after it: for a fault that leaves Slurm's view of a
    node behind it (a node cut off: slurmctld may count it NOT_RESPONDING up to SlurmdTimeout / 3 = 100 s later,
    which would slow the session's cluster3 for the tests after). It runs beside the session's clusters (each has
    its own bridge namespace). Start and teardown take 3.2 to 3.4 s and 0.2 to 0.3 s on the 2-core development
    VM, beside a running cluster or not."""
    yield from running_cluster(3, missing_for_three())


def missing_for_three() -> list[str]:
    """Why this machine cannot host the 3-node cluster (its tests also run `tc` and `iptables`)."""
    problems = missing_requirements()
    problems += [f"missing {tool}: run tests/cluster/install-deps" for tool in ("iptables", "tc")
                 if shutil.which(tool, path=f"{os.environ.get('PATH', '')}:/usr/sbin:/sbin") is None]  # fmt: skip
    return problems


def running_cluster(nodes: int, problems: list[str]) -> Iterator[Cluster]:
    """A cluster of nodes for a fixture to yield, torn down after it; skipped, naming the problems, where any."""
    if problems:
        pytest.skip("cannot build a namespace cluster: " + "; ".join(problems))
    running = start_cluster(nodes)
    try:
        yield running
    finally:
        running.teardown()


@pytest.fixture
def cluster_tmp_path(cluster: Cluster) -> Path:
    """A fresh directory every node sees at the same path (pytest's tmp_path is under /tmp, which is per node)."""
    return Path(tempfile.mkdtemp(dir=cluster.shared_dir))


@pytest.fixture(scope="session")
def sge_cluster(cluster: Cluster) -> Iterator[Sge]:
    """Son of Grid Engine on the session's cluster: qmaster on node1, an execd per node, queue all.q, PE mpi."""
    problems = missing_sge()
    if problems:
        pytest.skip("cannot run Grid Engine: " + "; ".join(problems))
    sge = start_sge(cluster)
    try:
        yield sge
    finally:
        stop_sge(sge)


# The Apptainer fixtures (a real apptainer, train.sif built once) for the runs through the SIF.
from tests.apptainer.runtime import apptainer, sif  # noqa: E402

__all__ = ["apptainer", "cluster", "cluster3", "cluster_tmp_path", "fresh_cluster3", "sge_cluster", "sif"]
