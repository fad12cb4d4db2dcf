#!/bin/bash
# zerokit on SGE/UGE as on ABCI (qsub, whole nodes, the host's MPI): edit the settings, then
#   qsub -g GROUP scripts/sge/train.sh
# Any setting can also come from the environment: qsub -v CONTAINER=none ... scripts/sge/train.sh
#$ -l rt_F=2
#$ -l h_rt=4:00:00
#$ -j y
#$ -cwd
#$ -N zerokit
#$ -r y

# ---- settings -----------------------------------------------------------------------------
RANKS_PER_NODE=${RANKS_PER_NODE:-4}               # = GPUs per node
CONTAINER=${CONTAINER:-singularity}               # apptainer | singularity | docker | podman | charliecloud | none (src/zerokit/image/runtimes.py)
ZEROKIT_DIR=${ZEROKIT_DIR:-${SGE_O_WORKDIR:-$PWD}}  # the zerokit checkout (scripts/container.sh)
IMAGE=${IMAGE:-$PWD/train.sif}
TRAIN_ARGS=${TRAIN_ARGS:---config zero3 --output-dir runs/zerokit-$JOB_ID}
IFNAME=${IFNAME:-}                                # NIC for MPI, NCCL and gloo; empty: the one routing to the first node
CHECK=${CHECK:-0}                                 # 1: the allocation's health check (launch --check-only) runs first, as its own step; a failing check ends the job
MODULES=${MODULES:-singularitypro hpcx}           # ABCI modules to load; empty: none
# ---------------------------------------------------------------------------------------------
set -euo pipefail
if [ -n "$MODULES" ] && [ -f /etc/profile.d/modules.sh ]; then
  source /etc/profile.d/modules.sh
  # shellcheck disable=SC2086
  module load $MODULES
fi
run=()                                            # CONTAINER=none: on the host
if [ "$CONTAINER" != none ]; then
  source "$ZEROKIT_DIR/scripts/container.sh" || { echo "error: set ZEROKIT_DIR to the zerokit checkout" >&2; exit 2; }
  container_words "$PWD"
fi
# ABCI writes the job's hosts to SGE_JOB_HOSTLIST; other SGE sites give PE_HOSTFILE.
hostfile=${SGE_JOB_HOSTLIST:-${PE_HOSTFILE:?neither SGE_JOB_HOSTLIST nor PE_HOSTFILE is set: submit with qsub}}
if [ "$CHECK" = 1 ]; then  # every rank, as training will run them
  check=$("${run[@]}" launch --launcher mpirun --hostfile "$hostfile" --nproc-per-node "$RANKS_PER_NODE" \
    ${IFNAME:+--ifname "$IFNAME"} --print-command --check-only)
  echo "+ $check"
  eval "$check" || { echo "zerokit: the health check failed (report above): not training" >&2; exit 1; }
fi
# shellcheck disable=SC2086
command=$("${run[@]}" launch --launcher mpirun --hostfile "$hostfile" --nproc-per-node "$RANKS_PER_NODE" \
  ${IFNAME:+--ifname "$IFNAME"} --print-command train $TRAIN_ARGS)
echo "+ $command"
eval "exec $command"
