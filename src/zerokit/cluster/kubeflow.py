"""Kubeflow's PyTorchJob on Kubernetes: one pod per node, started by the training operator.

The operator (kubeflow/training-operator v1.7 to v1.9, pkg/controller.v1/pytorch/envvar.go and
master.go) sets, in every container of every pod of a job with a Master replica: MASTER_ADDR (the
master pod, `<job>-master-0`), MASTER_PORT (its `pytorchjob-port`, 23456 by default), RANK and
PET_NODE_RANK (the pod's index: master 0, worker i is i+1), PET_NNODES (the pods), WORLD_SIZE (pods
times nprocPerNode) and PET_NPROC_PER_NODE (nprocPerNode, "auto" by default). The PET_* are
torchrun's own flag fallbacks: the operator expects torchrun to start each pod's ranks.

So a pod's process is one node, not one rank, and RANK is a node index. It must not be read as a
torchrun worker, which TorchrunEnvironment would do with RANK and WORLD_SIZE. The marker is what a
torchrun worker never lacks and a pod never has: PET_NODE_RANK and PET_NNODES (set by the operator
since v1.7) with KUBERNETES_SERVICE_HOST (the kubelet's, in every pod), and no LOCAL_RANK (torchrun
and `zerokit launch` set it for each worker, which then are torchrun's). That is why this comes
before TorchrunEnvironment in ENVIRONMENTS. Set ZEROKIT_LAUNCHER=kubeflow in the manifest (as
scripts/kubernetes/pytorchjob.yaml does) to refuse to start anywhere else. Older operators set no
PET_*: their pods are read as torchrun's and fail naming LOCAL_RANK; elastic jobs (PET_NNODES
"1:4") are refused.

`launch --nproc-per-node K` starts the pod's K ranks: this environment is one task per node.
"""

from __future__ import annotations

from collections.abc import Mapping

from zerokit.cluster.base import ClusterEnvironment

VARIABLES: dict[str, tuple[str, ...]] = {
    "rank": ("PET_NODE_RANK",),  # = RANK, set with it
    "world_size": ("PET_NNODES",),  # WORLD_SIZE counts pods times nprocPerNode
}
MARKERS = ("PET_NODE_RANK", "PET_NNODES", "KUBERNETES_SERVICE_HOST")


class KubeflowEnvironment(ClusterEnvironment):
    name = "kubeflow"
    title = "Kubeflow PyTorchJob"
    variables = VARIABLES
    job_variables = ()
    multi_node_tools = ()  # the operator starts every pod
    hosts_from = "the training operator exports none; MASTER_ADDR names the master pod"
    start_fix = (
        "run it as a PyTorchJob with a Master replica and fixed replicas (no elasticPolicy), and start the "
        "pod's ranks with `launch --nproc-per-node K`"
    )
    address_fix = "MASTER_ADDR in the pod's env (the operator sets it when the job has a Master replica)"
    # PET_NNODES and PET_NODE_RANK alone are torchrun's flags, set by hand as well: they say nothing.
    several_ranks_from = ()

    @staticmethod
    def detect(environ: Mapping[str, str]) -> bool:
        return all(v in environ for v in MARKERS) and "LOCAL_RANK" not in environ

    @property
    def hosts(self) -> tuple[str, ...]:
        return ()

    @property
    def local_rank(self) -> int:
        return 0

    @property
    def local_world_size(self) -> int:
        return 1

    @property
    def node_rank(self) -> int:
        return self.rank
