#!/usr/bin/env bash
# bench-criu.sh: restore of a synthetic process with stock CRIU and with
# criu-patches/, side by side in one run, beside the floor the machine sets.
# Run by `make bench-criu`; needs no GPU (run it on the 16-core GPU box too).
#
# The process is tests/criu/memstate: BENCH_CRIU_GB GiB of heap (the parent's
# own, so CRIU's restorer fills it) plus sparse, COW, memfd and shared
# memory (BENCH_CRIU_SHARED_MB each of the last two) in a parent and a
# forked child. It is dumped once; then each
# repetition restores the same images with stock criu and with ours, in
# alternating order, from a warm page cache (and once each from a cold one),
# checks every region's digest against the dump, and kills the tree again.
# The floor is pagefill: the same pages file read with pread() into fresh
# anonymous memory by 1 and by all threads, in the same run.
#
# Environment:
#   BENCH_CRIU_GB      heap size in GiB (2)
#   BENCH_CRIU_SHARED_MB  size of its memfd and of its shared anonymous memory, each, in MiB (32)
#   BENCH_REPS         repetitions (3)
#   BENCH_CRIU_COLD    1: also one restore each with the page cache dropped (1)
#   BENCH_CRIU_STOCK   stock criu (build/stock/bin/criu)
#   BENCH_CRIU_DIR     work folder for the images (/var/tmp/rekindle-bench-criu)
#   BENCH_OUT          where results go (build/bench)
#
# Output: BENCH_OUT/criu-TIMESTAMP.{json,png,md} and latest-criu.{json,png,md}.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
. "$root/scripts/lib.sh"
need_root
bin=${REKINDLE_BIN:-$root/build/bin}
gb=${BENCH_CRIU_GB:-2}
reps=${BENCH_REPS:-3}
cold=${BENCH_CRIU_COLD:-1}
stock=${BENCH_CRIU_STOCK:-$root/build/stock/bin/criu}
ours=$bin/criu
dir=$(realpath -m "${BENCH_CRIU_DIR:-/var/tmp/rekindle-bench-criu}")
out=$(realpath -m "${BENCH_OUT:-$root/build/bench}")
[[ $gb =~ ^[1-9][0-9]*$ ]] || die "BENCH_CRIU_GB must be a positive integer"
[[ $reps =~ ^[1-9][0-9]*$ ]] || die "BENCH_REPS must be a positive integer"
for c in "$stock" "$ours"; do
	[ -x "$c" ] || die "$c is missing: run 'make bench-criu' (it builds both)"
done
"$ours" --help | grep -q -- --restore-threads || die "$ours is not built with criu-patches/"
need_tool jq python3 setsid awk
cpus=$(nproc)

rm -rf "$dir"
mkdir -p "$dir/img" "$out"
tree_pid=
cleanup() {
	[ -n "$tree_pid" ] && [ "$tree_pid" -gt 1 ] && kill -KILL -- "-$tree_pid" 2>/dev/null
	[ "${BENCH_CRIU_KEEP:-0}" = 1 ] || rm -rf "$dir"
}
trap cleanup EXIT
# Its two C tools: from the stack's folder where a bundle put them (a GPU
# host may have no compiler), else built here.
if [ -x "$bin/memstate" ] && [ -x "$bin/pagefill" ]; then
	cp "$bin/memstate" "$bin/pagefill" "$dir/"
else
	gcc -O2 -static -o "$dir/memstate" "$root/tests/criu/memstate.c" || die "cannot build memstate"
	gcc -O2 -pthread -o "$dir/pagefill" "$root/scripts/pagefill.c" || die "cannot build pagefill"
fi

# wait_file FILE SECONDS
wait_file() {
	local i
	for ((i = 0; i < $2 * 10; i++)); do [ -s "$1" ] && return 0; sleep 0.1; done
	die "timed out waiting for $1"
}
# report DIR: have the tree write its digests into DIR.
report() {
	rm -f "$dir/out/parent.txt" "$dir/out/child.txt"
	kill -USR1 "$tree_pid"
	wait_file "$dir/out/parent.txt" 120
	wait_file "$dir/out/child.txt" 120
	mkdir -p "$1"
	mv "$dir/out/parent.txt" "$dir/out/child.txt" "$1/"
}
# kill_tree: kill the memstate tree (its own process group) and wait until
# its pids are free again, zombies reaped: the next restore needs them.
kill_tree() {
	local pids
	pids=$(ps -o pid= -g "$tree_pid")
	kill -KILL -- "-$tree_pid" 2>/dev/null || true
	wait_free $pids
}
wait_free() {
	local p
	for p in "$@"; do
		while [ -d "/proc/$p" ]; do sleep 0.05; done
	done
	tree_pid=
}
drop_caches() { sync; echo 3 >/proc/sys/vm/drop_caches; }
# elapsed FROM TO: seconds between two `date +%s.%N` stamps.
elapsed() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.3f", b - a }'; }

note "starting memstate with a ${gb} GiB heap"
mkdir -p "$dir/out"
setsid "$dir/memstate" $((gb * 1024)) "$dir/out" "${BENCH_CRIU_SHARED_MB:-32}" </dev/null >"$dir/memstate.log" 2>&1 &
wait_file "$dir/out/ready" 600
tree_pid=$(cat "$dir/out/ready")
report "$dir/before"

note "dumping it"
pids=$(ps -o pid= -g "$tree_pid")
t0=$(date +%s.%N)
"$ours" dump -t "$tree_pid" -D "$dir/img" -o dump.log -v2 || die "dump failed: $dir/img/dump.log"
t1=$(date +%s.%N)
wait_free $pids # the dump killed them
bytes=$(cat "$dir"/img/pages-*.img | wc -c)
dump_s=$(elapsed "$t0" "$t1")
biggest=$(ls -S "$dir"/img/pages-*.img | head -1)

# restore stock|patched warm|cold: one restore; prints a JSON line.
restore() {
	local name=$1 cache=$2 criu=$stock s e same
	[ "$name" = patched ] && criu=$ours
	if [ "$cache" = cold ]; then drop_caches; else cat "$dir"/img/pages-*.img >/dev/null; fi
	rm -f "$dir/restored.pid"
	s=$(date +%s.%N)
	# This restores into the host's pid namespace, where our CRIU uses helper
	# threads only when told how many (in a container's own namespace, as
	# runc restores, it takes one per CPU by default).
	local extra=()
	[ "$name" = patched ] && extra=(--restore-threads "$cpus")
	"$criu" restore -d -D "$dir/img" -o "restore-$name.log" -v2 --pidfile "$dir/restored.pid" "${extra[@]}" ||
		die "$name restore failed: $dir/img/restore-$name.log"
	e=$(date +%s.%N)
	tree_pid=$(cat "$dir/restored.pid")
	report "$dir/after-$name"
	same=true
	diff -r "$dir/before" "$dir/after-$name" >&2 || same=false
	kill_tree
	echo "{\"criu\": \"$name\", \"cache\": \"$cache\", \"seconds\": $(elapsed "$s" "$e"), \"same\": $same}"
}

results=$dir/results.jsonl
: >"$results"
for ((r = 1; r <= reps; r++)); do
	note "repetition $r of $reps"
	if ((r % 2)); then order="stock patched"; else order="patched stock"; fi
	for v in $order; do restore "$v" warm >>"$results"; done
done
if [ "$cold" = 1 ]; then
	restore stock cold >>"$results"
	restore patched cold >>"$results"
fi
grep -q '"same": false' "$results" && die "a restore changed the process's memory: see the diff above"

note "floors: pagefill with 1 and $cpus threads"
cat "$biggest" >/dev/null
floor1=$("$dir/pagefill" "$biggest" 1)
floorn=$("$dir/pagefill" "$biggest" "$cpus")

stamp=$(date -u +%Y%m%dT%H%M%SZ)
json=$out/criu-$stamp.json
jq -n --argjson bytes "$bytes" --argjson dump_s "$dump_s" --argjson cpus "$cpus" \
	--argjson heap_gib "$gb" --argjson shared_mib "${BENCH_CRIU_SHARED_MB:-32}" \
	--argjson floor1 "$floor1" --argjson floorn "$floorn" --arg host "$(uname -n)" \
	--arg kernel "$(uname -r)" --arg cpu "$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | xargs)" \
	--slurpfile runs "$results" \
	'{host: $host, kernel: $kernel, cpu: $cpu, cpus: $cpus, heap_gib: $heap_gib, shared_mib_each: $shared_mib,
	  image_bytes: $bytes, dump_seconds: $dump_s,
	  floor_1_thread: $floor1, floor_all_threads: $floorn, restores: $runs}' >"$json"
report_py=/usr/bin/python3
/usr/bin/python3 -c 'import matplotlib' 2>/dev/null || report_py=python3
"$report_py" "$root/scripts/bench-criu-report.py" "$json" || note "no chart or table: the raw result is $json"
for f in "$out/criu-$stamp".*; do cp "$f" "$out/latest-criu.${f##*.}"; done
cat "$out/criu-$stamp.md" 2>/dev/null || cat "$json"
