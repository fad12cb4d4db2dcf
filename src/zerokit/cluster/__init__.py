"""Cluster environments: where a process stands in a distributed job (rank, sizes, hosts, main
address and port), read from the variables a scheduler or launcher set. One module each."""

from zerokit.cluster.base import ClusterEnvironment, port_from_job_id
from zerokit.cluster.detect import ENVIRONMENTS, detect_environment
from zerokit.cluster.flux import FluxEnvironment
from zerokit.cluster.kubeflow import KubeflowEnvironment
from zerokit.cluster.lsf import LsfEnvironment
from zerokit.cluster.mpich import MpichEnvironment
from zerokit.cluster.mvapich import MvapichEnvironment
from zerokit.cluster.openmpi import OpenMpiEnvironment
from zerokit.cluster.pbs import PbsEnvironment
from zerokit.cluster.pmix import PmixEnvironment
from zerokit.cluster.sge import SgeEnvironment
from zerokit.cluster.slurm import SlurmEnvironment
from zerokit.cluster.torchrun import TorchrunEnvironment

__all__ = [
    "ENVIRONMENTS",
    "ClusterEnvironment",
    "FluxEnvironment",
    "KubeflowEnvironment",
    "LsfEnvironment",
    "MpichEnvironment",
    "MvapichEnvironment",
    "OpenMpiEnvironment",
    "PbsEnvironment",
    "PmixEnvironment",
    "SgeEnvironment",
    "SlurmEnvironment",
    "TorchrunEnvironment",
    "detect_environment",
    "port_from_job_id",
]
