#!/usr/bin/env bash
# containerd-up.sh DIR: start the stack's containerd with its root, state and
# socket under DIR (for test runs and boxes without systemd). It refuses to
# start over a containerd that still serves DIR; containerd-down.sh DIR
# stops it and removes everything it left.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
. "$here/lib.sh"
[ $# -eq 1 ] || die "usage: $0 DIR"
need_root
dir=$(realpath -m "$1")
bin=${REKINDLE_BIN:-$(dirname "$here")/build/bin}
for t in containerd ctr containerd-shim-runc-v2 runc criu; do
	[ -x "$bin/$t" ] || die "$bin/$t is missing: run 'make build' first"
done

pidfile=$dir/containerd.pid
if [ -f "$pidfile" ] && alive "$(cat "$pidfile")"; then
	die "a containerd (pid $(cat "$pidfile")) left by an earlier run still serves $dir: stop it with 'scripts/containerd-down.sh $dir'"
fi
sock=$dir/containerd.sock
if [ -S "$sock" ]; then
	if "$bin/ctr" --address "$sock" version >/dev/null 2>&1; then
		die "socket $sock is in use by another containerd: stop it or pick another DIR"
	fi
	rm -f "$sock" "$sock.ttrpc"
fi

mkdir -p "$dir/cni/net.d" "$dir/runc"
"$here/containerd-config.sh" "$dir" "$bin" >"$dir/config.toml"
modprobe overlay 2>/dev/null || true
# runc, criu and the shim are found on PATH; ours come first.
PATH=$bin:$PATH setsid "$bin/containerd" --config "$dir/config.toml" \
	>>"$dir/containerd.log" 2>&1 </dev/null &
echo $! >"$pidfile"

for _ in $(seq 100); do
	if "$bin/ctr" --address "$sock" version >/dev/null 2>&1; then
		note "containerd $("$bin/containerd" --version | awk '{print $3}') up on $sock (log: $dir/containerd.log)"
		exit 0
	fi
	alive "$(cat "$pidfile")" || break
	sleep 0.2
done
tail -5 "$dir/containerd.log" >&2
die "containerd did not come up on $sock; see $dir/containerd.log"
