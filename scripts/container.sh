# Sourced by the job scripts (bash): `container_words DIR [--srun]` sets the array `run` to the words that
# run a command in $IMAGE with the runtime $CONTAINER, with the GPUs, DIR bound at its own path, and DIR as
# the working directory; --srun where the words follow srun (CONTAINER=pyxis gives srun options). The
# runtimes are one table, src/zerokit/image/runtimes.py, read here with the host's python3 from $ZEROKIT_DIR (the
# checkout: Slurm and SGE run a copy of the job script, elsewhere). With $ZEROKIT_NCCL_PLUGIN (the host's NCCL
# net plugin: its .so or folder) the words also bind it and the host libraries it needs (image/plugin_binds.py).
container_words() {
  local words plugin=()
  if [ -n "${ZEROKIT_NCCL_PLUGIN:-}" ]; then
    words=$(python3 "$ZEROKIT_DIR/src/zerokit/image/plugin_binds.py" "$ZEROKIT_NCCL_PLUGIN") || exit 2
    mapfile -t plugin <<<"$words"
  fi
  words=$(python3 "$ZEROKIT_DIR/src/zerokit/image/runtimes.py" argv "$CONTAINER" "$IMAGE" --gpu --bind "$1" --workdir "$1" \
    ${plugin[@]+"${plugin[@]}"} "${@:2}") || exit 2
  mapfile -t run <<<"$words"
}
