#!/usr/bin/env bash
# fleet-up.sh DIR N [kraken]: a fleet of N nodes on this host under DIR
# (fleet/fleet.sh): the origin registry behind FLEET_RATE, N nodes each with
# its own containerd, and with kraken Kraken's herd and an agent per node as
# the nodes' registry mirror. fleet-down.sh DIR removes it.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
. "$root/scripts/lib.sh"
. "$root/fleet/fleet.sh"
[ $# -ge 2 ] && [ "$2" -ge 1 ] 2>/dev/null || die "usage: $0 DIR N [kraken]"
need_root
need_tool nsenter unshare tc ip
dir=$(realpath -m "$1") n=$2 mode=${3:-}
case $mode in '' | kraken) ;; *) die "$0: the third argument is kraken or nothing, not '$mode'" ;; esac
fleet_net_up "$dir" "$n"
fleet_registry_up "$dir"
[ "$mode" != kraken ] || fleet_herd_up "$dir"
for ((i = 1; i <= n; i++)); do fleet_node_up "$dir" "$i" "$mode"; done
note "fleet of $n node(s) up under $dir: origin registry $(fleet_registry "$dir") at $FLEET_RATE${mode:+, through Kraken}"
