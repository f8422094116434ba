#!/usr/bin/env bash
# demo.sh: start the CPU reference engine under a private containerd,
# checkpoint it into an image with oci-checkpoint, remove it, restore it
# twice with a plain `nerdctl run IMAGE` (the second from the checkpoint
# cache), check it answers as before, and print the time of every phase.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
. "$root/scripts/lib.sh"
need_root
bin=${REKINDLE_BIN:-$root/build/bin}
dir=${REKINDLE_DEMO_DIR:-/tmp/rekindle-demo}
image=rekindle.local/demo-checkpoint:latest
prompt='{"text": "the quick brown fox", "max_new_tokens": 16}'
for t in oci-checkpoint rekindle-wake nerdctl containerd; do
	[ -x "$bin/$t" ] || die "$bin/$t is missing: run 'make build' first"
done
for i in base cpu-engine; do
	[ -f "$root/build/images/$i.tar" ] || die "build/images/$i.tar is missing: run 'make images'"
done

if [ -e "$dir/containerd.pid" ]; then
	note "stopping the containerd an earlier demo left in $dir"
	"$root/scripts/containerd-down.sh" "$dir" >/dev/null 2>&1 || true
fi
rm -rf "$dir"
trap '"$root/scripts/containerd-down.sh" "$dir" >/dev/null 2>&1 || true' EXIT
"$root/scripts/containerd-up.sh" "$dir"
export CONTAINERD_ADDRESS=$dir/containerd.sock PATH=$bin:$PATH
n() { "$root/scripts/nerdctl.sh" "$dir" "$@"; }
now() { date +%s.%N; }
secs() { awk -v a="$1" -v b="$2" 'BEGIN {printf "%.2f", b - a}'; }
port() { "$root/scripts/free-ports.py"; }
call() { curl -fsS --max-time 30 "$@"; }
generate() { call -X POST -H 'Content-Type: application/json' -d "$prompt" "http://127.0.0.1:$1/generate" | jq -r .text; }
wait_url() { # wait_url URL SECONDS
	local i
	for ((i = 0; i < $2 * 50; i++)); do call -o /dev/null "$1" 2>/dev/null && return 0; sleep 0.02; done
	die "no answer from $1 within $2 s"
}

note "loading the base and engine images"
n load -i "$root/build/images/base.tar" >/dev/null
n load -i "$root/build/images/cpu-engine.tar" >/dev/null

p=$(port)
t0=$(now)
n run -d --name demo-engine -p "127.0.0.1:$p:30000" rekindle.local/cpu-engine:latest >/dev/null
wait_url "http://127.0.0.1:$p/health" 120
before=$(generate "$p")
t1=$(now)
cold=$(secs "$t0" "$t1")
note "engine up (cold start to first answer ${cold}s): \"$before\""

oci-checkpoint create --json demo-engine "$image" >"$dir/checkpoint.json"
ck=$(jq -r '.phases[] | "\(.name) \(.seconds)"' "$dir/checkpoint.json" | awk '{printf "%s%s %.2fs", (NR > 1 ? "  " : ""), $1, $2}')
n rm -f demo-engine >/dev/null
oci-checkpoint check "$image"

# restore NAME: nerdctl run the checkpoint image, wait for the wake helper's
# status, ask for the same prompt; prints the restore's phase line.
restore() {
	local name=$1 p status t0 t1 t2 t3 after setup criu
	p=$(port)
	t0=$(now)
	n run -d --name "$name" -p "127.0.0.1:$p:30000" "$image" >/dev/null
	t1=$(now)
	for _ in $(seq 500); do
		status=$(n exec "$name" cat /.rekindle/status 2>/dev/null) && break
		sleep 0.02
	done
	[ -n "${status:-}" ] || die "$name: the wake helper wrote no /.rekindle/status"
	[ "$(jq -r .outcome <<<"$status")" = resumed ] || die "$name: resume failed: $(jq -r .error <<<"$status")"
	t2=$(now)
	after=$(generate "$p")
	t3=$(now)
	[ "$after" = "$before" ] || die "$name answered \"$after\", before the checkpoint \"$before\""
	read -r setup criu < <(grep "restored from checkpoint image" "$dir/containerd.log" | tail -1 |
		sed -n 's/.*container-setup=\([0-9.]*\)s .*criu-restore=\([0-9.]*\)s.*/\1 \2/p')
	printf 'container-setup %.2fs  criu-restore %.2fs  nerdctl-run %.2fs  wake %.2fs  first-token %.2fs  total %.2fs\n' \
		"${setup:-0}" "${criu:-0}" "$(secs "$t0" "$t1")" "$(jq -r .resume_seconds <<<"$status")" \
		"$(secs "$t2" "$t3")" "$(secs "$t0" "$t3")"
}
first=$(restore demo-restored)
n rm -f demo-restored >/dev/null
second=$(restore demo-cached)
total=$(awk '{print $NF}' <<<"$second" | tr -d s)

echo
echo "==> checkpoint: $ck"
echo "==> restore (nerdctl run): $first"
echo "==> restore again (cached): $second"
echo "==> the restored engine answered \"$before\", as before the checkpoint"
awk -v c="$cold" -v r="$total" 'BEGIN {printf "==> cold start %.2fs, cached restore to first token %.2fs (%.1fx)\n", c, r, c / r}'
