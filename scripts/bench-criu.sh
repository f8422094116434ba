#!/usr/bin/env bash
# bench-criu.sh: restore of synthetic process trees with stock CRIU and with
# criu-patches/, side by side in one run, beside the floors the machine sets.
# Run by `make bench-criu`; needs no GPU (run it on the 16-core GPU box too,
# with a larger BENCH_CRIU_GB).
#
# The processes are tests/criu/memstate, in three shapes of BENCH_CRIU_GB
# (G) GiB each, every one with sparse, COW, memfd and shared memory
# (BENCH_CRIU_SHARED_MB each of the last two) beside what the shape is about:
#   heap  a parent with a private heap of G GiB, its own (CRIU's restorer
#         fills it), and a forked child
#   cow   a parent with a heap of G GiB shared copy-on-write with a forked
#         child, which rewrote every other page (CRIU premaps it and must
#         keep the other half shared), and a 64 MiB heap of its own
#   tree  four processes (parent, child, two workers), each with a heap of
#         its own of G/4 GiB: an engine with an API server, a core and helpers
# Each shape is dumped once; then each repetition restores the same images
# with stock criu and with ours (and BENCH_CRIU_UPSTREAM's, if set), in
# alternating order, from a warm page cache, and BENCH_CRIU_COLD times each
# from a cold one (caches dropped); every restore's digests (per process and region, COW
# pages still shared included) are checked against the dump, and the tree
# killed again. The floors, from the first shape's largest pages image:
# pagefill reading it with pread() into fresh anonymous memory by 1 and by
# all threads from the page cache, and by all threads with O_DIRECT from a
# cold disk, in the same run. The report gives each cold restore's rate
# (pages images' bytes over the whole restore's seconds) as a share of that
# last floor, and the read path the patched fills took (with O_DIRECT or
# through the page cache: criu's --restore-direct-io, auto by default), from
# one more untimed -v3 restore, cold where the run has cold restores.
#
# Environment:
#   BENCH_CRIU_GB      size of each shape in GiB (2: a few minutes on a 2-core VM; 16 on the GPU box)
#   BENCH_CRIU_SHAPES  which shapes, in order ("heap cow tree")
#   BENCH_CRIU_SHARED_MB  size of its memfd and of its shared anonymous memory, each, in MiB (32)
#   BENCH_REPS         warm repetitions (3)
#   BENCH_CRIU_COLD    cold restores each, page cache dropped, alternating (1; 0: none)
#   BENCH_CRIU_STOCK   stock criu (build/stock/bin/criu)
#   BENCH_CRIU_UPSTREAM  another criu to restore with too, e.g. upstream 4.3 (none)
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
[[ $cold =~ ^[0-9]+$ ]] || die "BENCH_CRIU_COLD must be a number of cold restores"
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
{ "$dir/memstate" 2>&1 || true; } | grep -q -- '-w WORKERS' ||
	die "$bin/memstate predates its shapes (-c, -w): rebuild it from tests/criu/memstate.c"
{ "$dir/pagefill" 2>&1 || true; } | grep -q -- direct ||
	die "$bin/pagefill predates its O_DIRECT floor: rebuild it from scripts/pagefill.c"

# wait_file FILE SECONDS
wait_file() {
	local i
	for ((i = 0; i < $2 * 10; i++)); do [ -s "$1" ] && return 0; sleep 0.1; done
	die "timed out waiting for $1"
}
# report DIR: have the tree write its digests into DIR, one file per process
# (the roles memstate listed in out/roles).
report() {
	local role
	for role in $(cat "$dir/out/roles"); do rm -f "$dir/out/$role.txt"; done
	kill -USR1 "$tree_pid"
	mkdir -p "$1"
	for role in $(cat "$dir/out/roles"); do
		wait_file "$dir/out/$role.txt" 120
		mv "$dir/out/$role.txt" "$1/"
	done
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

shared_mb=${BENCH_CRIU_SHARED_MB:-32}
mb=$((gb * 1024))
# shape_args SHAPE: memstate's arguments before OUTDIR, and after it.
shape_args() {
	case "$1" in
	heap) pre=("$mb") ;;
	cow) pre=(-c "$mb" 64) ;;
	tree) pre=(-w "2:$((mb / 4))" "$((mb / 4))") ;;
	*) die "unknown shape '$1' in BENCH_CRIU_SHAPES: heap, cow, tree" ;;
	esac
}

# restore SHAPE NAME warm|cold: one restore with criu NAME (stock, patched,
# upstream); prints a JSON line.
restore() {
	local shape=$1 name=$2 cache=$3 criu=$stock s e same
	[ "$name" = patched ] && criu=$ours
	[ "$name" = upstream ] && criu=$upstream
	local v=-v2
	[[ $cache = *-v3 ]] && v=-v3
	if [[ $cache = cold* ]]; then drop_caches; else cat "$dir"/img/pages-*.img >/dev/null; fi
	rm -f "$dir/restored.pid"
	s=$(date +%s.%N)
	# This restores into the host's pid namespace, where our CRIU uses helper
	# threads only when told how many (in a container's own namespace, as
	# runc restores, it takes one per CPU by default).
	local extra=()
	[ "$name" = patched ] && extra=(--restore-threads "$cpus")
	"$criu" restore -d -D "$dir/img" -o "restore-$name.log" "$v" --pidfile "$dir/restored.pid" "${extra[@]}" ||
		die "$shape: $name restore failed: $dir/img/restore-$name.log"
	e=$(date +%s.%N)
	tree_pid=$(cat "$dir/restored.pid")
	report "$dir/after-$name"
	same=true
	diff -r "$dir/before" "$dir/after-$name" >&2 || same=false
	kill_tree
	echo "{\"shape\": \"$shape\", \"criu\": \"$name\", \"cache\": \"$cache\", \"seconds\": $(elapsed "$s" "$e"), \"same\": $same}"
}

variants="stock patched"
if [ -n "${BENCH_CRIU_UPSTREAM:-}" ]; then
	upstream=$(realpath -e "$BENCH_CRIU_UPSTREAM") || die "BENCH_CRIU_UPSTREAM=$BENCH_CRIU_UPSTREAM is missing"
	"$upstream" --version >/dev/null || die "$upstream does not run here"
	variants+=" upstream"
fi
results=$dir/results.jsonl shapes_json=$dir/shapes.jsonl
: >"$results"
: >"$shapes_json"
floor1= floorn= floorcold=
for shape in ${BENCH_CRIU_SHAPES:-heap cow tree}; do
	shape_args "$shape"
	note "$shape: starting memstate ${pre[*]} OUT $shared_mb"
	rm -rf "$dir/img" "$dir/out" "$dir/before" "$dir"/after-*
	mkdir -p "$dir/img" "$dir/out"
	setsid "$dir/memstate" "${pre[@]}" "$dir/out" "$shared_mb" </dev/null >"$dir/memstate.log" 2>&1 &
	disown # the dump kills it: no "Killed" from bash
	wait_file "$dir/out/ready" 900
	tree_pid=$(cat "$dir/out/ready")
	report "$dir/before"

	note "$shape: dumping it"
	pids=$(ps -o pid= -g "$tree_pid")
	nprocs=$(wc -w <<<"$pids")
	t0=$(date +%s.%N)
	"$ours" dump -t "$tree_pid" -D "$dir/img" -o dump.log -v2 || die "$shape: dump failed: $dir/img/dump.log"
	t1=$(date +%s.%N)
	wait_free $pids # the dump killed them
	bytes=$(cat "$dir"/img/pages-*.img | wc -c)
	shape_line="{\"shape\": \"$shape\", \"processes\": $nprocs, \"image_bytes\": $bytes, \"dump_seconds\": $(elapsed "$t0" "$t1"), \"memstate_args\": \"${pre[*]} OUT $shared_mb\"}"

	for ((r = 1; r <= reps; r++)); do
		note "$shape: repetition $r of $reps"
		order=$variants
		((r % 2)) || order=$(tr ' ' '\n' <<<"$variants" | tac | xargs)
		for v in $order; do restore "$shape" "$v" warm >>"$results"; done
	done
	for ((r = 1; r <= cold; r++)); do
		note "$shape: cold restore $r of $cold"
		order=$variants
		((r % 2)) || order=$(tr ' ' '\n' <<<"$variants" | tac | xargs)
		for v in $order; do restore "$shape" "$v" cold >>"$results"; done
	done
	# One more patched restore, untimed, that logs which fills went to
	# helpers and how they read the pages images (pr_info, -v3: it would
	# slow the timed ones, stock's too); cold where the run has cold
	# restores, so that it shows their read path (O_DIRECT or the page cache).
	v3=warm-v3
	((cold)) && v3=cold-v3
	restore "$shape" patched "$v3" >/dev/null
	fills=$(grep -E 'Filling [0-9]+ MiB of (premapped private|private|shared) memory[^ ]* .*in [0-9]+ chunks with ([2-9]|[1-9][0-9]+) ' \
		"$dir/img/restore-patched.log" | sed 's/^.*Filling/Filling/' | jq -Rs 'split("\n") | map(select(. != ""))')
	jq -c --argjson f "$fills" '.parallel_fills = $f' <<<"$shape_line" >>"$shapes_json"
	grep -q '"same": false' "$results" && die "$shape: a restore changed the process's memory: see the diff above"

	if [ -z "$floor1" ]; then
		biggest=$(ls -S "$dir"/img/pages-*.img | head -1)
		note "floors: pagefill of $(basename "$biggest") with 1 and $cpus threads, warm; $cpus, cold with O_DIRECT"
		cat "$biggest" >/dev/null
		floor1=$("$dir/pagefill" "$biggest" 1)
		floorn=$("$dir/pagefill" "$biggest" "$cpus")
		drop_caches
		# A file system without O_DIRECT (tmpfs) gets the buffered cold read.
		floorcold=$("$dir/pagefill" "$biggest" "$cpus" direct 2>/dev/null || "$dir/pagefill" "$biggest" "$cpus")
	fi
done

stamp=$(date -u +%Y%m%dT%H%M%SZ)
json=$out/criu-$stamp.json
jq -n --argjson cpus "$cpus" --argjson size_gib "$gb" --argjson shared_mib "$shared_mb" \
	--argjson floor1 "$floor1" --argjson floorn "$floorn" --argjson floorcold "$floorcold" --arg host "$(uname -n)" \
	--arg kernel "$(uname -r)" --arg cpu "$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | xargs)" \
	--slurpfile shapes "$shapes_json" --slurpfile runs "$results" \
	'{host: $host, kernel: $kernel, cpu: $cpu, cpus: $cpus, size_gib: $size_gib, shared_mib_each: $shared_mib,
	  floor_1_thread: $floor1, floor_all_threads: $floorn, floor_cold_direct: $floorcold,
	  shapes: $shapes, restores: $runs}' >"$json"
report_py=/usr/bin/python3
/usr/bin/python3 -c 'import matplotlib' 2>/dev/null || report_py=python3
"$report_py" "$root/scripts/bench-criu-report.py" "$json" || note "no chart or table: the raw result is $json"
for f in "$out/criu-$stamp".*; do cp "$f" "$out/latest-criu.${f##*.}"; done
cat "$out/criu-$stamp.md" 2>/dev/null || cat "$json"
