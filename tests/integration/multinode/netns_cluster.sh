# Sourced by the multinode tests: a cluster of nodes on one machine, each node a Linux network
# namespace of its own (own interfaces, addresses and loopback), joined through a bridge that
# lives in a namespace of its own too, so nothing of the machine's own network changes. Every
# node has an address in 10.213.7.0/24 on its interface `eth0`, a hosts file naming all nodes
# (`ip netns exec` mounts /etc/netns/NS/hosts over /etc/hosts), and runs its processes under its
# own host name (a UTS namespace per command). OpenMPI reaches the nodes through rsh_agent.sh
# (plm_rsh_agent) instead of ssh. Needs root and iproute2.
#
#   cluster_up NODE...        # e.g. cluster_up nodeA nodeB nodeC; sets CLUSTER_DIR
#   on_node NODE CMD...       # runs CMD on NODE (in its namespace, with its host name);
#                             # $CLUSTER_DIR/on_node.sh is the same as a program (exec's through)
#   node_link NODE down|up    # takes NODE's link to the switch down or up
#   cluster_down              # removes everything cluster_up made (safe to call twice)

cluster_id=fw$$
cluster_nodes=()

# True when this machine can make the cluster (root, ip netns, veth, bridge); else prints why.
cluster_possible() {
  if [[ $(id -u) != 0 ]]; then echo "not root"; return 1; fi
  if ! command -v ip > /dev/null || ! command -v unshare > /dev/null; then
    echo "iproute2 or unshare missing"; return 1
  fi
  local probe=${cluster_id}probe
  if ! ip netns add "$probe" 2> /dev/null; then echo "cannot create network namespaces"; return 1; fi
  local ok=1
  ip netns exec "$probe" ip link add br0 type bridge 2> /dev/null || ok=0
  ip netns exec "$probe" ip link add v0 type veth peer name v1 2> /dev/null || ok=0
  ip netns del "$probe"
  if [[ $ok == 0 ]]; then echo "cannot create bridges or veth pairs"; return 1; fi
  return 0
}

cluster_up() {
  CLUSTER_DIR=$(mktemp -d)
  local switch=${cluster_id}sw
  ip netns add "$switch"
  ip netns exec "$switch" ip link add br0 type bridge
  ip netns exec "$switch" ip link set br0 up
  local i=1 hosts="127.0.0.1 localhost"$'\n'
  for node in "$@"; do
    local ns=${cluster_id}$node
    ip netns add "$ns"
    ip link add eth0 netns "$ns" type veth peer name "$node" netns "$switch"
    ip netns exec "$switch" ip link set "$node" master br0 up
    ip netns exec "$ns" ip addr add "10.213.7.$i/24" dev eth0
    ip netns exec "$ns" ip link set eth0 up
    ip netns exec "$ns" ip link set lo up
    hosts+="10.213.7.$i $node"$'\n'
    cluster_nodes+=("$node")
    i=$((i + 1))
  done
  for node in "$@"; do
    mkdir -p "/etc/netns/${cluster_id}$node"
    printf '%s' "$hosts" > "/etc/netns/${cluster_id}$node/hosts"
  done
  # on_node.sh NODE COMMAND...: runs COMMAND on NODE, exec'ing all the way down (its pid is the
  # command's, for signals). OpenMPI's rsh agent is the same with one string of commands.
  cat > "$CLUSTER_DIR/on_node.sh" << SCRIPT
#!/bin/sh
node=\$1
shift
exec ip netns exec "${cluster_id}\$node" unshare --uts sh -c 'hostname "\$1" && shift && exec "\$@"' sh "\$node" "\$@"
SCRIPT
  cat > "$CLUSTER_DIR/rsh_agent.sh" << SCRIPT
#!/bin/sh
node=\$1
shift
exec "$CLUSTER_DIR/on_node.sh" "\$node" sh -c "\$*"
SCRIPT
  chmod +x "$CLUSTER_DIR/on_node.sh" "$CLUSTER_DIR/rsh_agent.sh"
}

on_node() { "$CLUSTER_DIR/on_node.sh" "$@"; }

node_link() {
  ip netns exec "${cluster_id}sw" ip link set "$1" "$2"
}

cluster_down() {
  for node in "${cluster_nodes[@]}"; do
    ip netns pids "${cluster_id}$node" 2> /dev/null | xargs -r kill -9 2> /dev/null
    ip netns del "${cluster_id}$node" 2> /dev/null
    rm -rf "/etc/netns/${cluster_id}$node"
  done
  ip netns del "${cluster_id}sw" 2> /dev/null
  cluster_nodes=()
  [[ -n "${CLUSTER_DIR:-}" ]] && rm -rf "$CLUSTER_DIR"
  CLUSTER_DIR=""
}
