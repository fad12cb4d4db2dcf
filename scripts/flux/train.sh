#!/bin/bash
# zerokit on Flux, one rank per GPU (flux run starts every rank): edit the settings, then
#   flux batch scripts/flux/train.sh
# Any setting can also come from the environment: CONTAINER=none flux batch scripts/flux/train.sh
# flux: --job-name=zerokit
# flux: -N 2
# flux: --exclusive
# flux: -t 4h
# flux: --output=zerokit-{{id}}.out

# ---- settings -----------------------------------------------------------------------------
NODES=${NODES:-2}                                 # = the -N above
RANKS_PER_NODE=${RANKS_PER_NODE:-4}               # = GPUs per node: one rank each
GPUS_PER_RANK=${GPUS_PER_RANK:-1}                 # 0 on CPU-only nodes
CONTAINER=${CONTAINER:-apptainer}                 # apptainer | singularity | docker | none (src/zerokit/image/runtimes.py)
ZEROKIT_DIR=${ZEROKIT_DIR:-$PWD}                  # the zerokit checkout (scripts/container.sh); Flux runs a copy of this script
IMAGE=${IMAGE:-$PWD/train.sif}                    # a .sif (apptainer) or an image name (docker)
TRAIN_ARGS=${TRAIN_ARGS:---config zero3 --output-dir runs/zerokit-$(flux getattr jobid)}
IFNAME=${IFNAME:-}                                # NIC for NCCL/gloo; empty: the one routing to the main node
CHECK=${CHECK:-0}                                 # 1: the allocation's health check (launch --check-only) runs first, as its own step; a failing check ends the job
# ---------------------------------------------------------------------------------------------
set -euo pipefail
run=()                                            # CONTAINER=none: on the host
if [ "$CONTAINER" != none ]; then
  source "$ZEROKIT_DIR/scripts/container.sh" || { echo "error: set ZEROKIT_DIR to the zerokit checkout" >&2; exit 2; }
  container_words "$PWD"
fi

# Flux gives its tasks no host list (src/zerokit/cluster/flux.py): rank 0 runs on the job's first node
# (block mapping over every node of this batch job), so that is the main address. flux run passes this
# environment on to every task.
MASTER_ADDR=${MASTER_ADDR:-$(flux hostlist --nth=0 instance)}
export MASTER_ADDR
gpus=()
[ "$GPUS_PER_RANK" -gt 0 ] && gpus=(--gpus-per-task="$GPUS_PER_RANK")
if [ "$CHECK" = 1 ]; then  # every rank, as training will run them
  # shellcheck disable=SC2086
  flux run -N "$NODES" --tasks-per-node="$RANKS_PER_NODE" "${gpus[@]}" "${run[@]}" launch --launcher flux \
    ${IFNAME:+--ifname "$IFNAME"} --check-only || { echo "zerokit: the health check failed (report above): not training" >&2; exit 1; }
fi
# shellcheck disable=SC2086
exec flux run -N "$NODES" --tasks-per-node="$RANKS_PER_NODE" "${gpus[@]}" \
  "${run[@]}" launch --launcher flux ${IFNAME:+--ifname "$IFNAME"} train $TRAIN_ARGS
