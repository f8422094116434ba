#!/usr/bin/env bash
# containerd-probe.sh PREFIX CONFIG [PLUGIN...]: start PREFIX/bin/containerd
# with CONFIG, its root, state, sockets and CRI stream port moved into a
# private directory, check that it answers `ctr version` and that each PLUGIN
# ("TYPE ID") loaded, then stop it and remove the directory. For hosts where
# systemd does not run containerd (CI, containers).
set -euo pipefail
prefix=$1 config=$2
shift 2
ctr=$prefix/bin/ctr
[ -x "$prefix/bin/containerd" ] || { echo "no containerd in $prefix/bin" >&2; exit 1; }
[ -f "$config" ] || { echo "no configuration $config" >&2; exit 1; }

dir=$(mktemp -d "${TMPDIR:-/tmp}/rekindle-probe.XXXXXX")
pid=''
cleanup() {
	if [ -n "$pid" ]; then
		kill -TERM "$pid" 2>/dev/null || true
		for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
		kill -KILL "$pid" 2>/dev/null || true
	fi
	awk -v d="$dir/" 'index($5, d) == 1 {print $5}' /proc/self/mountinfo | sort -r |
		while read -r m; do umount "$m" 2>/dev/null || umount -l "$m"; done
	rm -rf "$dir"
}
trap cleanup EXIT

sock=$dir/containerd.sock
# The configuration's own root, state, sockets and stream port, replaced.
sed -e "s|^root = .*|root = \"$dir/root\"|" \
	-e "s|^state = .*|state = \"$dir/state\"|" \
	-e "s|^\( *address = \)\"[^\"]*\.ttrpc\"|\1\"$sock.ttrpc\"|" \
	-e "/\.ttrpc\"/!s|^\( *address = \)\"[^\"]*\"|\1\"$sock\"|" \
	-e "s|^\( *stream_server_port = \).*|\1\"0\"|" \
	"$config" >"$dir/config.toml"
{ grep -q "^root = \"$dir/root\"" "$dir/config.toml" && grep -q "address = \"$sock\"" "$dir/config.toml"; } ||
	{ echo "cannot move root and socket of $config into $dir" >&2; exit 1; }

PATH=$prefix/bin:$PATH setsid "$prefix/bin/containerd" --config "$dir/config.toml" \
	>"$dir/containerd.log" 2>&1 </dev/null &
pid=$!
for _ in $(seq 100); do
	"$ctr" --address "$sock" version >/dev/null 2>&1 && break
	kill -0 "$pid" 2>/dev/null || break
	sleep 0.2
done
if ! "$ctr" --address "$sock" version; then
	tail -20 "$dir/containerd.log" >&2
	echo "containerd from $prefix with $config did not answer" >&2
	exit 1
fi
plugins=$("$ctr" --address "$sock" plugins ls)
bad=0
for p in "$@"; do
	# ctr plugins ls: TYPE ID PLATFORMS STATUS
	if ! awk -v t="${p% *}" -v i="${p#* }" '$1 == t && $2 == i && $NF == "ok" {f = 1} END {exit !f}' <<<"$plugins"; then
		echo "plugin $p did not load:" >&2
		grep -F -- "${p#* }" <<<"$plugins" >&2 || true
		bad=1
	fi
done
[ "$bad" = 0 ] || { grep -i 'level=error\|level=warn' "$dir/containerd.log" | tail -10 >&2; exit 1; }
echo "plugins loaded: $*"
