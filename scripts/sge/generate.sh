#!/bin/bash
# zerokit generate on SGE/UGE as on ABCI (qsub, whole nodes, the host's MPI): a model's answers to a file of
# prompts, the rows shared by every rank (or by groups of TP_SIZE ranks that split one model). Edit the
# settings, then
#   qsub -g GROUP scripts/sge/generate.sh
# Any setting can also come from the environment: qsub -v CONTAINER=none ... scripts/sge/generate.sh
# Rows are written as they finish: a rerun job (--resume) generates only those left.
#$ -l rt_F=2
#$ -l h_rt=2:00:00
#$ -j y
#$ -cwd
#$ -N generate
#$ -r y

# ---- settings -----------------------------------------------------------------------------
RANKS_PER_NODE=${RANKS_PER_NODE:-4}               # = GPUs per node
CONTAINER=${CONTAINER:-singularity}               # apptainer | singularity | docker | podman | charliecloud | none (src/zerokit/image/runtimes.py)
ZEROKIT_DIR=${ZEROKIT_DIR:-${SGE_O_WORKDIR:-$PWD}}  # the zerokit checkout (scripts/container.sh)
IMAGE=${IMAGE:-$PWD/train.sif}
MODEL=${MODEL:-runs/qa}                           # a folder train wrote, a checkpoint, an adapter, or a model staged by prepare
GENERATE_ARGS=${GENERATE_ARGS:-'--dataset data/qa.jsonl --template "Question: {question}\nAnswer:" --max-new-tokens 256 --batch-size 16 --dtype bf16 --output runs/qa/answers.jsonl --resume --report runs/qa/generate-report.json'}
TP_SIZE=${TP_SIZE:-1}                             # ranks that split one model (a divisor of RANKS_PER_NODE); 1: a whole model per rank
IFNAME=${IFNAME:-}                                # NIC for MPI, NCCL and gloo; empty: the one routing to the first node
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
# GENERATE_ARGS is split as the shell splits a command line: a template keeps its quotes.
eval "args=($GENERATE_ARGS)"
# ABCI writes the job's hosts to SGE_JOB_HOSTLIST; other SGE sites give PE_HOSTFILE.
hostfile=${SGE_JOB_HOSTLIST:-${PE_HOSTFILE:?neither SGE_JOB_HOSTLIST nor PE_HOSTFILE is set: submit with qsub}}
command=$("${run[@]}" launch --launcher mpirun --hostfile "$hostfile" --nproc-per-node "$RANKS_PER_NODE" \
  ${IFNAME:+--ifname "$IFNAME"} --print-command generate "$MODEL" --tp-size "$TP_SIZE" "${args[@]}")
echo "+ $command"
eval "exec $command"
