#!/bin/bash
# zerokit with the host's MPI (OpenMPI): RANKS_PER_NODE ranks on every host of a hostfile.
# Edit the settings, then run it on the first host: scripts/mpirun/train.sh
# Any setting can also come from the environment: HOSTFILE=hosts CONTAINER=none scripts/mpirun/train.sh
# OpenMPI reads extra settings from OMPI_MCA_* variables (e.g. OMPI_MCA_plm_rsh_agent).

# ---- settings -----------------------------------------------------------------------------
HOSTFILE=${HOSTFILE:-hosts}                       # one host per line
RANKS_PER_NODE=${RANKS_PER_NODE:-4}               # = GPUs per host
CONTAINER=${CONTAINER:-apptainer}                 # apptainer | singularity | docker | podman | charliecloud | none (src/zerokit/image/runtimes.py)
ZEROKIT_DIR=${ZEROKIT_DIR:-$(cd "$(dirname "$0")/../.." && pwd)}  # the zerokit checkout (scripts/container.sh)
IMAGE=${IMAGE:-$PWD/train.sif}
TRAIN_ARGS=${TRAIN_ARGS:---config zero3 --output-dir runs/mpirun-$(date +%Y%m%d-%H%M%S)}
IFNAME=${IFNAME:-}                                # NIC for MPI, NCCL and gloo; empty: the one routing to the first host
CHECK=${CHECK:-0}                                 # 1: the allocation's health check (launch --check-only) runs first, as its own step; a failing check ends the job
# ---------------------------------------------------------------------------------------------
set -euo pipefail
run=()                                            # CONTAINER=none: on the host
if [ "$CONTAINER" != none ]; then
  source "$ZEROKIT_DIR/scripts/container.sh" || { echo "error: set ZEROKIT_DIR to the zerokit checkout" >&2; exit 2; }
  container_words "$PWD"
fi
# launch writes the mpirun command (hosts, ranks per node, NIC for MPI/NCCL/gloo, main address and
# port, re-entering the image on every rank); the host's mpirun runs it.
if [ "$CHECK" = 1 ]; then  # every rank, as training will run them
  check=$("${run[@]}" launch --launcher mpirun --hostfile "$HOSTFILE" --nproc-per-node "$RANKS_PER_NODE" \
    ${IFNAME:+--ifname "$IFNAME"} --print-command --check-only)
  echo "+ $check"
  eval "$check" || { echo "zerokit: the health check failed (report above): not training" >&2; exit 1; }
fi
# shellcheck disable=SC2086
command=$("${run[@]}" launch --launcher mpirun --hostfile "$HOSTFILE" --nproc-per-node "$RANKS_PER_NODE" \
  ${IFNAME:+--ifname "$IFNAME"} --print-command train $TRAIN_ARGS)
echo "+ $command"
eval "exec $command"
