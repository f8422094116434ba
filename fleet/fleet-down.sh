#!/usr/bin/env bash
# fleet-down.sh DIR: stop the fleet that fleet-up.sh started under DIR and
# remove its namespaces, links and processes. Safe to run twice.
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
. "$root/scripts/lib.sh"
. "$root/fleet/fleet.sh"
[ $# -eq 1 ] || die "usage: $0 DIR"
need_root
fleet_down "$(realpath -m "$1")"
