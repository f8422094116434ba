#!/usr/bin/env bash
# containerd-down.sh DIR: stop the containerd that containerd-up.sh started on
# DIR and remove what it left: containers (with their CNI networks), shims,
# container processes, mounts and network namespaces under DIR. Safe to run
# twice, or after a killed run.
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
. "$here/lib.sh"
[ $# -eq 1 ] || die "usage: $0 DIR"
need_root
dir=$(realpath -m "$1")
bin=${REKINDLE_BIN:-$(dirname "$here")/build/bin}
[ -d "$dir" ] || exit 0
sock=$dir/containerd.sock

# Containers first, through nerdctl so its hooks release CNI addresses.
if "$bin/ctr" --address "$sock" version >/dev/null 2>&1; then
	for ns in $("$bin/ctr" --address "$sock" namespaces ls -q); do
		ids=$("$here/nerdctl.sh" "$dir" --namespace "$ns" ps -aq 2>/dev/null)
		[ -z "$ids" ] || "$here/nerdctl.sh" "$dir" --namespace "$ns" rm -f $ids >/dev/null 2>&1
		for t in $("$bin/ctr" --address "$sock" -n "$ns" tasks ls -q 2>/dev/null); do
			"$bin/ctr" --address "$sock" -n "$ns" tasks kill -s SIGKILL "$t" >/dev/null 2>&1
			"$bin/ctr" --address "$sock" -n "$ns" tasks delete -f "$t" >/dev/null 2>&1
		done
	done
fi

if [ -f "$dir/containerd.pid" ]; then
	pid=$(cat "$dir/containerd.pid")
	if alive "$pid"; then
		kill -TERM "$pid"
		for _ in $(seq 50); do alive "$pid" || break; sleep 0.2; done
		kill -KILL "$pid" 2>/dev/null
	fi
	rm -f "$dir/containerd.pid"
fi

# Whatever runc still knows under our state: containers whose bundle is ours.
for root in "$dir/runc"/* /run/containerd/runc/*; do
	[ -d "$root" ] || continue
	"$bin/runc" --root "$root" list -f json 2>/dev/null |
		jq -r --arg d "$dir/" '.[]? | select(.bundle | startswith($d)) | .id' |
		while read -r id; do "$bin/runc" --root "$root" delete -f "$id" >/dev/null 2>&1; done
done

# Shims and anything else started with our socket on its command line.
for pid in $(pids_with "$sock"); do kill -KILL "$pid" 2>/dev/null; done
sleep 0.2

# Mounts under DIR, deepest first (overlay rootfs, netns bind mounts, shm).
mounts_under() { awk -v d="$dir/" 'index($5, d) == 1 {print $5}' /proc/self/mountinfo; }
mounts_under | sort -r | while read -r m; do umount "$m" 2>/dev/null || umount -l "$m"; done
left=$(mounts_under)
[ -z "$left" ] || die "mounts still under $dir: $left"
rm -f "$sock" "$sock.ttrpc"
exit 0
