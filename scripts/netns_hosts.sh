#!/usr/bin/env bash
# Test hosts on one machine: N network namespaces ("quiver-h0" ... ), each with its own
# eth0 (10.77.0.1, 10.77.0.2, ...) plugged into one bridge, so processes started with
# `ip netns exec quiver-hK ...` talk to each other only over that virtual network, as
# separate hosts would. Needs root.
#   netns_hosts.sh up N     creates them and prints their names
#   netns_hosts.sh down N   removes them
set -euo pipefail
action=${1:?usage: netns_hosts.sh up|down N}
count=${2:?usage: netns_hosts.sh up|down N}
bridge=quiverbr0

down() {
  for ((h = 0; h < count; h++)); do
    ip netns del "quiver-h$h" 2>/dev/null || true
    ip link del "quiver-v$h" 2>/dev/null || true
  done
  ip link del "$bridge" 2>/dev/null || true
}

if [ "$action" = down ]; then down; exit 0; fi
[ "$action" = up ] || { echo "usage: netns_hosts.sh up|down N" >&2; exit 2; }
down
ip link add "$bridge" type bridge
ip link set "$bridge" up
for ((h = 0; h < count; h++)); do
  ns="quiver-h$h"
  ip netns add "$ns"
  ip link add "quiver-v$h" type veth peer name eth0 netns "$ns"
  ip link set "quiver-v$h" master "$bridge" up
  ip -n "$ns" addr add "10.77.0.$((h + 1))/24" dev eth0
  ip -n "$ns" link set eth0 up
  ip -n "$ns" link set lo up
  echo "$ns"
done
