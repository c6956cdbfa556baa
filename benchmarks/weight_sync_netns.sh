#!/usr/bin/env bash
# weight_sync_bench --delta between two network namespaces joined by a link of a fixed rate
# (tc tbf on the switch's ports; default 1 Gbit/s), where the link and not loopback is the limit:
# the controller on node A (10.213.7.1), the rollout worker on node B. Needs root and iproute2
# (the multinode test's namespaces: tests/integration/multinode/netns_cluster.sh).
#
#   benchmarks/weight_sync_netns.sh [RATE] [weight_sync_bench options...]
#   benchmarks/weight_sync_netns.sh 1gbit --params 100000000 --updates 3
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
bench=${FLYWHEEL_BUILD_DIR:-$root/build}/benchmarks/weight_sync_bench
rate=${1:-1gbit}
shift || true
[[ -x $bench ]] || { echo "weight_sync_netns: build $bench first" >&2; exit 1; }

source "$root/tests/integration/multinode/netns_cluster.sh"
if ! why=$(cluster_possible); then
  echo "weight_sync_netns: cannot make network namespaces here: $why" >&2
  exit 1
fi
trap cluster_down EXIT
cluster_up nodeA nodeB
for port in nodeA nodeB; do  # both directions through the switch
  ip netns exec "${cluster_id}sw" tc qdisc add dev "$port" root tbf rate "$rate" burst 256kb \
    latency 50ms
done
echo "weight_sync_netns: nodeA 10.213.7.1 <-> nodeB 10.213.7.2, each switch port shaped to $rate"
on_node nodeA "$bench" --delta --bind 10.213.7.1 --worker-prefix "$CLUSTER_DIR/on_node.sh nodeB" \
  "$@"
