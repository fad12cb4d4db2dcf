"""The commands that start ranks across nodes, and what to do when one is missing.

Each environment names the ones it needs (`multi_node_tools`); outside any scheduler `launch` starts
the nodes itself, over pdsh and ssh (HEAD_NODE_TOOLS). doctor checks them (doctor/launchers.py).
"""

from __future__ import annotations

import shutil
from dataclasses import dataclass


@dataclass(frozen=True)
class Tool:
    name: str
    fix: str  # how to get it, for doctor's failed check
    also: tuple[str, ...] = ()  # other commands that do the same (mpiexec for mpirun)

    def find(self, path: str | None) -> str | None:
        """Where the tool (or one that does the same) is on `path`, None if nowhere."""
        return next(filter(None, (shutil.which(name, path=path) for name in (self.name, *self.also))), None)


PDSH = Tool(
    "pdsh",
    "install pdsh (`apt-get install pdsh`; the zerokit images have it), or start under a scheduler (srun, mpirun)",
)
SSH = Tool("ssh", "install openssh-client and set up keys between the nodes, or start under a scheduler (srun, mpirun)")
MPIRUN = Tool(
    "mpirun",
    "load the site's MPI (`module load openmpi`) or install openmpi-bin (the zerokit images have it)",
    also=("mpiexec",),
)
SRUN = Tool(
    "srun",
    "run on a node with Slurm's client tools; with a container, call srun on the host: "
    "`srun apptainer exec ... launch ...`",
)
FLUX = Tool(
    "flux",
    "run inside a Flux instance (`flux batch`, `flux alloc`) on a node with flux-core; with a container, call "
    "flux on the host: `flux run apptainer exec ... launch ...`",
)

# Outside any scheduler (and under a torchrun started by hand) `launch --launcher pdsh` starts the nodes.
HEAD_NODE_TOOLS: tuple[Tool, ...] = (PDSH, SSH)
