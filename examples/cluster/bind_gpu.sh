#!/usr/bin/env bash
# Runs a command with one GPU: CUDA_VISIBLE_DEVICES is set to the GPU picked by this process's
# node-local rank among the GPUs already visible (all of the node's when none are set).
#   mpirun ... bind_gpu.sh flywheel learner c.yaml       (OMPI_COMM_WORLD_LOCAL_RANK)
#   srun ...   bind_gpu.sh flywheel learner c.yaml       (SLURM_LOCALID)
# A process on a node without GPUs runs unchanged.
set -euo pipefail
local_rank=${OMPI_COMM_WORLD_LOCAL_RANK:-${SLURM_LOCALID:-${LOCAL_RANK:-0}}}
if [[ -n ${CUDA_VISIBLE_DEVICES:-} ]]; then
  IFS=, read -r -a gpus <<<"$CUDA_VISIBLE_DEVICES"
else
  count=$(nvidia-smi --list-gpus 2>/dev/null | wc -l || true)
  gpus=()
  for ((i = 0; i < count; i++)); do gpus+=("$i"); done
fi
if ((${#gpus[@]} > 0)); then
  export CUDA_VISIBLE_DEVICES=${gpus[local_rank % ${#gpus[@]}]}
fi
exec "$@"
