#!/usr/bin/env bash
# Learners and rollout workers in one OpenMPI MPMD job (docs/cluster.md).
#
# Layout (edit the variables below): node1 runs the learner ranks (and, as learner rank 0, the
# controller); node2 and node3 run the rollout workers. One process per GPU, 8 GPUs per node
# (LEARNERS and WORKERS_PER_NODE set other counts, e.g. on CPU nodes):
#
#   mpirun world rank  0..7   flywheel learner   on node1   (rank 0 hosts the controller)
#   mpirun world rank  8..23  flywheel rollout   on node2, node3
#
# The rollout ranks get the controller's address from learner rank 0 over MPI, so they need no
# --controller. The controller listens on CONTROLLER_PORT on all interfaces, so more workers
# can join later from any host:
#   flywheel rollout CONFIG --controller node1:50051 --worker-id extra-0
#
# Host file (written below to $HOSTFILE; one line per node, slots = processes it may run):
#   node1 slots=8
#   node2 slots=8
#   node3 slots=8
#
# Needs: the same flywheel binary, OpenMPI and model/data paths on every node; password-less ssh
# from this node (or run it inside a Slurm allocation); logging.run_dir on a shared filesystem.
set -euo pipefail

CONFIG=${CONFIG:-configs/recipes/qwen2.5-1.5b-instruct-grpo.yaml}
FLYWHEEL=${FLYWHEEL:-$(command -v flywheel || echo build/flywheel)}
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
LEARNER_HOST=${LEARNER_HOST:-node1}
ROLLOUT_HOSTS=${ROLLOUT_HOSTS:-node2 node3}
GPUS_PER_NODE=${GPUS_PER_NODE:-8}
LEARNERS=${LEARNERS:-$GPUS_PER_NODE}                  # learner ranks on LEARNER_HOST
WORKERS_PER_NODE=${WORKERS_PER_NODE:-$GPUS_PER_NODE}  # rollout workers on each rollout host
CONTROLLER_PORT=${CONTROLLER_PORT:-50051}
NET_IF=${NET_IF:-eth0}         # the cluster network interface (ip -br addr), same name on all nodes
HOSTFILE=${HOSTFILE:-$(mktemp)}
# weight_sync.transport: grpc (workers pull from the controller), mpi (learner rank 0 broadcasts
# to the rollout ranks over MPI; CPU jobs) or nccl (the same between GPUs; built, not yet run on
# a GPU). Learners and workers must agree.
WEIGHT_SYNC=${WEIGHT_SYNC:-grpc}

# The shared token: learners and workers read $FLYWHEEL_TOKEN (buffer.server.auth_token_env).
export FLYWHEEL_TOKEN=${FLYWHEEL_TOKEN:-$(openssl rand -hex 32)}

# MPI traffic and OpenMPI's start-up channel on the cluster network (OMPI_MCA_* are forwarded).
export OMPI_MCA_btl_tcp_if_include=$NET_IF
export OMPI_MCA_oob_tcp_if_include=$NET_IF
# NCCL (learner collectives): the interface for bootstrap/sockets; uncomment as needed.
export NCCL_SOCKET_IFNAME=$NET_IF
export NCCL_DEBUG=${NCCL_DEBUG:-WARN}
# export NCCL_IB_HCA=mlx5_0,mlx5_1   # InfiniBand adapters to use
# export NCCL_IB_DISABLE=1           # TCP instead of InfiniBand

: >"$HOSTFILE"
echo "$LEARNER_HOST slots=$LEARNERS" >>"$HOSTFILE"
for host in $ROLLOUT_HOSTS; do echo "$host slots=$WORKERS_PER_NODE" >>"$HOSTFILE"; done
rollout_hosts_csv=""
for host in $ROLLOUT_HOSTS; do rollout_hosts_csv+="${rollout_hosts_csv:+,}$host:$WORKERS_PER_NODE"; done
num_rollout=$((WORKERS_PER_NODE * $(wc -w <<<"$ROLLOUT_HOSTS")))

# Global options first (they apply to both app contexts), then learners, ':', rollout workers.
# --bind-to none: each process runs cluster.threads_per_process threads (plus reward threads in
# workers); alternatively --map-by ppr:8:node:PE=<threads> --bind-to core.
exec mpirun --hostfile "$HOSTFILE" \
  --bind-to none \
  -x FLYWHEEL_TOKEN -x NCCL_SOCKET_IFNAME -x NCCL_DEBUG -x PATH -x LD_LIBRARY_PATH \
  -np "$LEARNERS" --host "$LEARNER_HOST:$LEARNERS" \
    "$HERE/bind_gpu.sh" "$FLYWHEEL" learner "$CONFIG" \
      --set buffer.server.bind_address="0.0.0.0:$CONTROLLER_PORT" \
      --set weight_sync.transport="$WEIGHT_SYNC" \
  : -np "$num_rollout" --host "$rollout_hosts_csv" \
    "$HERE/bind_gpu.sh" "$FLYWHEEL" rollout "$CONFIG" --set weight_sync.transport="$WEIGHT_SYNC"
