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
# cold disk, in the same run. Each shape's cold floor is its own pages
# images read at once, each by all threads with O_DIRECT, as a restore
# reads them, measured after every round of cold restores (the disk of a
# virtual machine varies by a fifth from minute to minute): the report
# gives each cold restore's rate (pages images' bytes over the whole
# restore's seconds) as a share of the median of these, and the read path
# the patched fills took (with O_DIRECT or through the page cache: criu's
# --restore-direct-io, auto by default).
#
# Fill rates: one more untimed restore with each criu, warm and (where the
# run has cold restores) cold, at -v3 (its timed ones run at -v2: logging
# would slow them), whose restore.log gives when each task filled its
# memory: in criu, from the line before its pagemap walk to its
# "nr_restored_pages" (premapped and copy-on-write memory, read or
# compared), and in its restorer, from its last "Remap" to its next line
# (private memory: the heap). The fill rate is the tasks' pages images
# (pagemap-PID.img names each one's pages-N.img) over the time any task
# was filling; the heap fill rate is the largest private fill (its MiB from
# the patched log's "Filling N MiB of private memory") over its own time,
# the rate the >= 10 GB/s warm target is about. Stock's -v3 log has a
# line for each page it compares, so its copy-on-write fills (cow, tree)
# read slower there than in its timed restores: a floor for stock's rate.
# The report appends them as a table beside the medians of the timed
# restores, stock and patched side by side.
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
	gcc -O2 -pthread -o "$dir/pagefill" "$root/bench/pagefill.c" || die "cannot build pagefill"
fi
{ "$dir/memstate" 2>&1 || true; } | grep -q -- '-w WORKERS' ||
	die "$bin/memstate predates its shapes (-c, -w): rebuild it from tests/criu/memstate.c"
{ "$dir/pagefill" 2>&1 || true; } | grep -q -- direct ||
	die "$bin/pagefill predates its O_DIRECT floor: rebuild it from bench/pagefill.c"

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
# cold_floor SHAPE: its pages images read at once from a cold page cache,
# each by pagefill with all threads and O_DIRECT (buffered where the file
# system takes no O_DIRECT: tmpfs); a JSON line.
cold_floor() {
	local imgs=("$dir"/img/pages-*.img) f s e p pids=() direct=direct failed=0
	dd if="${imgs[0]}" of=/dev/null bs=4096 count=1 iflag=direct status=none 2>/dev/null || direct=
	drop_caches
	s=$(date +%s.%N)
	for f in "${imgs[@]}"; do
		"$dir/pagefill" "$f" "$cpus" $direct >/dev/null &
		pids+=($!)
	done
	for p in "${pids[@]}"; do wait "$p" || failed=1; done
	e=$(date +%s.%N)
	((failed == 0)) || die "$1: pagefill of its pages images failed"
	echo "{\"shape\": \"$1\", \"direct\": $([ -n "$direct" ] && echo true || echo false), \"files\": ${#imgs[@]}, \"bytes\": $(stat -c %s "${imgs[@]}" | awk '{ n += $1 } END { printf "%d", n }'), \"seconds\": $(elapsed "$s" "$e")}"
}
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

# fill_rates SHAPE NAME warm|cold LOG PATCHED_LOG: the fill times of a -v3
# restore.log (see the top), as a JSON line; PATCHED_LOG, of the same
# images, gives the MiB of each task's private fill.
fill_rates() {
	python3 - "$@" "$dir/img" <<'EOF'
import json, os, re, struct, sys

shape, criu, cache, log, plog, img = sys.argv[1:7]
line = re.compile(r"^\((\d+\.\d+)\)\s+(pie: )?\s*(\d+): (.*)")


def parse(path):
    out = []
    for l in open(path, errors="replace"):
        m = line.match(l)
        if m:
            out.append((float(m[1]), bool(m[2]), m[3], m[4]))
    return out


def varint(b, i):
    v = s = 0
    while True:
        v |= (b[i] & 0x7F) << s
        s += 7
        i += 1
        if not b[i - 1] & 0x80:
            return v, i


# Each task's pages image: pagemap-PID.img is two magics, then entries of
# a 32-bit length and a protobuf, the first a PagemapHead (1: pages_id).
task_bytes = 0
for f in os.listdir(img):
    m = re.fullmatch(r"pagemap-(\d+)\.img", f)
    if not m:
        continue
    b = open(os.path.join(img, f), "rb").read()
    (n,) = struct.unpack_from("<I", b, 8)
    if n and b[12] == 0x08:
        pid, _ = varint(b, 13)
        p = os.path.join(img, f"pages-{pid}.img")
        if os.path.exists(p):
            task_bytes += os.path.getsize(p)

ev = parse(log)
# Premapped and compared memory, in criu: from the task's line before its
# pagemap walk (its first "prPID-N Read" or "Filling ... premapped" line) to
# its "nr_restored_pages".
spans, prev, start = [], {}, {}
walk = re.compile(r"pr\d+-\d+ Read |Filling \d+ MiB of premapped")
for t, pie, pid, msg in ev:
    if pie:
        continue
    if pid not in start and walk.match(msg):
        start[pid] = prev.get(pid, t)
    elif msg.startswith("nr_restored_pages") and start.get(pid) is not None:
        spans.append((start[pid], t))
        start[pid] = None  # once
    prev[pid] = t
# Private memory, in the restorer: its last Remap (or its start) to its next line.
private = {}
for pid in {p for _, pie, p, _ in ev if pie}:
    mine = [(t, msg) for t, pie, p, msg in ev if pie and p == pid]
    first = [i for i, (_, msg) in enumerate(mine) if msg.startswith("Switched to the restorer")]
    if not first:
        continue
    i = first[0]
    for j in range(i, len(mine)):
        if mine[j][1].startswith("Remap "):
            i = j
    k = next((j for j in range(i + 1, len(mine)) if not mine[j][1].startswith("Filling")), None)
    if k is not None:
        private[pid] = (mine[i][0], mine[k][0])
        spans.append(private[pid])
# The time any task was filling: the union of the spans.
busy, end = 0.0, None
for a, b in sorted(spans):
    if end is None or a > end:
        busy += b - a
        end = b
    elif b > end:
        busy += b - end
        end = b
# The largest private fill: its MiB from the patched log (the same images).
mib = {}
for t, pie, pid, msg in parse(plog):
    m = re.match(r"Filling (\d+) MiB of private memory", msg)
    if pie and m:
        mib[pid] = int(m[1])
heap = None
big = [p for p in private if p in mib]
if big:
    p = max(big, key=lambda p: mib[p])
    s = max(private[p][1] - private[p][0], 1e-6)
    heap = {"pid": int(p), "mib": mib[p], "seconds": round(s, 3), "gbps": round(mib[p] * 2**20 / s / 1e9, 2)}
print(json.dumps({"shape": shape, "criu": criu, "cache": cache, "fill_bytes": task_bytes,
                  "fill_seconds": round(busy, 3), "fill_gbps": round(task_bytes / busy / 1e9, 2) if busy else None,
                  "heap_fill": heap}))
EOF
}

variants="stock patched"
if [ -n "${BENCH_CRIU_UPSTREAM:-}" ]; then
	upstream=$(realpath -e "$BENCH_CRIU_UPSTREAM") || die "BENCH_CRIU_UPSTREAM=$BENCH_CRIU_UPSTREAM is missing"
	"$upstream" --version >/dev/null || die "$upstream does not run here"
	variants+=" upstream"
fi
results=$dir/results.jsonl shapes_json=$dir/shapes.jsonl fills_json=$dir/fills.jsonl floors_json=$dir/floors.jsonl
: >"$results"
: >"$floors_json"
: >"$shapes_json"
: >"$fills_json"
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
		cold_floor "$shape" >>"$floors_json"
	done
	# One more restore with each criu, untimed, warm and cold, at -v3 (it
	# would slow the timed ones, stock's most): when each task filled its
	# memory (fill rates, see the top), and which fills went to helpers and
	# how they read the pages images; the latter from the patched cold one
	# where the run has cold restores (their read path: O_DIRECT or the
	# page cache).
	caches=warm
	((cold)) && caches="warm cold"
	mkdir -p "$dir/logs"
	for c in $caches; do
		for v in $variants; do
			restore "$shape" "$v" "$c-v3" >/dev/null
			cp "$dir/img/restore-$v.log" "$dir/logs/$shape-$v-$c.log"
		done
	done
	for c in $caches; do
		for v in $variants; do
			fill_rates "$shape" "$v" "$c" "$dir/logs/$shape-$v-$c.log" "$dir/logs/$shape-patched-$c.log" >>"$fills_json"
		done
	done
	v3=warm
	((cold)) && v3=cold
	fills=$(grep -E 'Filling [0-9]+ MiB of (premapped private|private|shared) memory[^ ]* .*in [0-9]+ chunks with ([2-9]|[1-9][0-9]+) ' \
		"$dir/logs/$shape-patched-$v3.log" | sed 's/^.*Filling/Filling/' | jq -Rs 'split("\n") | map(select(. != ""))')
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
	--slurpfile shapes "$shapes_json" --slurpfile runs "$results" --slurpfile fills "$fills_json" \
	--slurpfile cold_floors "$floors_json" \
	'{host: $host, kernel: $kernel, cpu: $cpu, cpus: $cpus, size_gib: $size_gib, shared_mib_each: $shared_mib,
	  floor_1_thread: $floor1, floor_all_threads: $floorn, floor_cold_direct: $floorcold,
	  cold_floors: $cold_floors, shapes: $shapes, restores: $runs, fills: $fills}' >"$json"
report_py=/usr/bin/python3
/usr/bin/python3 -c 'import matplotlib' 2>/dev/null || report_py=python3
"$report_py" "$root/bench/bench-criu-report.py" "$json" || note "no chart or table: the raw result is $json"
# The fill rates, beside the whole restores' medians, appended to the table.
[ -f "$out/criu-$stamp.md" ] && python3 - "$json" >>"$out/criu-$stamp.md" <<'EOF'
import json, statistics, sys

r = json.load(open(sys.argv[1]))
variants = [v for v in ("stock", "patched", "upstream") if any(x["criu"] == v for x in r["fills"])]


def med(shape, criu, cache):
    s = [x["seconds"] for x in r["restores"] if x["shape"] == shape and x["criu"] == criu and x["cache"] == cache]
    return statistics.median(s) if s else None


def fill(shape, criu, cache):
    return next((x for x in r["fills"] if x["shape"] == shape and x["criu"] == criu and x["cache"] == cache), None)


head = ["shape", "cache"]
for v in variants:
    head += [f"{v} restore s", f"{v} fill s", f"{v} fill GB/s", f"{v} heap fill GB/s"]
rows = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
for sh in r["shapes"]:
    for cache in ("warm", "cold"):
        if not any(fill(sh["shape"], v, cache) for v in variants):
            continue
        row = [sh["shape"], cache]
        for v in variants:
            t, f = med(sh["shape"], v, cache), fill(sh["shape"], v, cache)
            h = f and f["heap_fill"]
            row += [f"{t:.2f}" if t else "-", f"{f['fill_seconds']:.2f}" if f else "-",
                    f"{f['fill_gbps']:.2f}" if f and f["fill_gbps"] else "-",
                    f"{h['gbps']:.2f} ({h['mib']} MiB)" if h else "-"]
        rows.append("| " + " | ".join(row) + " |")
print()
print("Fill rates, from one more untimed restore with each criu at -v3 (warm, and cold where the run has cold "
      "restores): fill s is the time any task was filling its memory (in criu: premapped and copy-on-write "
      "memory, read or compared; in its restorer: private memory), fill GB/s the tasks' pages images over it, "
      "heap fill GB/s the largest private fill (the heap) over its own time (target: >= 10 GB/s warm, patched). "
      "Restore s are the medians of the timed restores above. Stock's -v3 log has a line for each page it "
      "compares, which slows its cow and tree fills there: a floor for stock's rate.")
print()
print("\n".join(rows))
EOF
for f in "$out/criu-$stamp".*; do cp "$f" "$out/latest-criu.${f##*.}"; done
cat "$out/criu-$stamp.md" 2>/dev/null || cat "$json"
