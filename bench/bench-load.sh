#!/usr/bin/env bash
# bench-load.sh: N restores at once of one checkpoint image of the CPU
# engine (issue 61), for each N of BENCH_LOAD_N, under a private containerd:
#   new     the image's cache entry removed first (rekindle-cache-gc.sh
#           --max-age 0s --max-size 0; page cache dropped): N `nerdctl run -d`
#           at once must build the entry once
#   cached  N at once again, the entry kept
# Each restore's time runs from its `nerdctl run` to its first correct
# /generate answer (bench-poll.py, started just before the run). Per round:
# min/median/max of those, the round's wall time, the host's memory
# (MemAvailable's drop at its lowest, sampled from /proc/meminfo; the peak
# RSS of containerd and its shims; the engines' memory cgroups' charge once
# all have answered), the cache builds containerd logged, and
# after removing the containers a check that nothing of them is left
# (tests/bats/faults.bash's what_is_left, plus no hold, building snapshot,
# shim or lease beyond those before the rounds). Run by `make bench` after
# bench.sh, or alone: `make bench-load`.
#
# Environment:
#   BENCH_LOAD_N         the Ns, space-separated positive integers ("1 4 8 16")
#   BENCH_LOAD_STATE_MB  the engine's ENGINE_STATE_MB (256: 16 engines fit in 24 GiB)
#   BENCH_LOAD_DIR       the private containerd's folder (/tmp/rekindle-bench-load)
#   BENCH_OUT            where results go (build/bench): load-cpu-TIMESTAMP.{json,md},
#                        latest-load-cpu.{json,md}
#   BENCH_DROP_CACHES    1: drop the page cache before each new-entry round (1)
#   BENCH_TIMEOUT        seconds a restore may take to answer (600)
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
. "$root/scripts/lib.sh"
bin=${REKINDLE_BIN:-$root/build/bin}
ns_list=${BENCH_LOAD_N-1 4 8 16}
state_mb=${BENCH_LOAD_STATE_MB:-256}
dir=$(realpath -m "${BENCH_LOAD_DIR:-/tmp/rekindle-bench-load}")
out=$(realpath -m "${BENCH_OUT:-$root/build/bench}")
images=${BENCH_IMAGES:-$root/build/images}
drop=${BENCH_DROP_CACHES:-1}
timeout=${BENCH_TIMEOUT:-600}

read -r -a ns <<<"$ns_list"
[ ${#ns[@]} -gt 0 ] || die "BENCH_LOAD_N is empty: give the counts of restores at once, e.g. BENCH_LOAD_N='1 4 8 16'"
for x in "${ns[@]}"; do
	[[ $x =~ ^[1-9][0-9]{0,2}$ ]] ||
		die "BENCH_LOAD_N='$ns_list': '$x' is not a count of restores (1-999); give space-separated counts, e.g. BENCH_LOAD_N='1 4 8 16'"
done
[[ $state_mb =~ ^[1-9][0-9]*$ ]] || die "BENCH_LOAD_STATE_MB must be a positive integer (MB), not '$state_mb'"
[[ $timeout =~ ^[1-9][0-9]*$ ]] || die "BENCH_TIMEOUT must be a positive integer (seconds), not '$timeout'"
need_root
for t in oci-checkpoint rekindle-wake nerdctl containerd ctr runc; do
	[ -x "$bin/$t" ] || die "$bin/$t is missing: run 'make build' first"
done
for i in base cpu-engine; do
	[ -f "$images/$i.tar" ] || die "$images/$i.tar is missing: run 'make images'"
done
need_tool jq python3 ss

# Cap N where N engines would not fit: each holds its state and about 100 MB
# more; keep a fifth of what is available for the rest of the host.
avail_kb=$(awk '/^MemAvailable/ {print $2}' /proc/meminfo)
fit=$((avail_kb * 4 / 5 / 1024 / (state_mb + 100)))
[ "$fit" -ge 1 ] || die "not one engine of $state_mb MB fits in $((avail_kb >> 10)) MB available: lower BENCH_LOAD_STATE_MB"
capped=()
for k in "${!ns[@]}"; do
	if [ "${ns[$k]}" -gt "$fit" ]; then
		note "warning: ${ns[$k]} engines of ${state_mb} MB do not fit in $((avail_kb >> 10)) MB available: capped at $fit"
		capped+=("${ns[$k]}")
		ns[$k]=$fit
	fi
done

if [ -e "$dir/containerd.pid" ]; then
	note "stopping the containerd an earlier bench-load left in $dir"
	"$root/scripts/containerd-down.sh" "$dir" >/dev/null 2>&1 || true
fi
rm -rf "$dir"
mkdir -p "$dir" "$out"
sampler=
cleanup() {
	[ -z "$sampler" ] || kill "$sampler" 2>/dev/null || true
	"$root/scripts/containerd-down.sh" "$dir" >/dev/null 2>&1 || true
}
trap cleanup EXIT
CONTAINERD_TASK_STATE_TIMEOUT=${BENCH_TASK_STATE_TIMEOUT:-120s} "$root/scripts/containerd-up.sh" "$dir"
export CONTAINERD_ADDRESS=$dir/containerd.sock PATH=$bin:$PATH
sock=$dir/containerd.sock
n() { "$root/scripts/nerdctl.sh" "$dir" "$@"; }
k() { "$bin/ctr" --address "$sock" -n default "$@"; }
# ports COUNT: COUNT distinct loopback ports nobody listens on.
ports() { "$root/scripts/free-ports.py" "$1"; }
# what_is_left NAME PORT ID, run outside bats: it needs these three.
REKINDLE_ROOT=$root RK_DIR=$dir BIN=$bin
# shellcheck source=tests/bats/faults.bash
. "$root/tests/bats/faults.bash"

prompt='{"text": "the quick brown fox", "max_new_tokens": 16}'
image=rekindle.local/bench-load:latest

note "loading base, cpu-engine"
for i in base cpu-engine; do n load -i "$images/$i.tar" >/dev/null; done
note "the engine (ENGINE_STATE_MB=$state_mb), checkpointed once into $image"
p=$(ports 1)
n run -d --name load-src -p "127.0.0.1:$p:30000" -e "ENGINE_STATE_MB=$state_mb" rekindle.local/cpu-engine:latest >/dev/null
python3 "$root/bench/bench-poll.py" "$p" "$prompt" 120 >"$dir/src.json" || die "the engine did not answer: $(cat "$dir/src.json")"
said=$(jq -c '[.text, .output_ids]' "$dir/src.json")
oci-checkpoint create --quiet load-src "$image" >/dev/null || die "oci-checkpoint create load-src $image failed"
n rm -f load-src >/dev/null

# shims: this stack's shims, by the socket on their command line.
shims() {
	local q
	for q in $(pgrep -f '^[^ ]*containerd-shim-runc-v2 ' 2>/dev/null); do
		# 2> first: a shim gone since pgrep is no error.
		tr '\0' ' ' 2>/dev/null <"/proc/$q/cmdline" | grep -qF -- "$sock" && echo "$q"
	done
	return 0
}
# rss_kb: containerd's and this stack's shims' resident memory, in kB.
rss_kb() {
	local q t=0 r
	for q in $(cat "$dir/containerd.pid") $(shims); do
		r=$(awk '/^VmRSS/ {print $2}' "/proc/$q/status" 2>/dev/null) || r=0
		t=$((t + ${r:-0}))
	done
	echo "$t"
}
# sample FILE: MemAvailable (kB) every 100 ms and the RSS every 500 ms,
# "avail rss" a line, until killed.
sample() {
	local i=0 rss=0
	while :; do
		((i++ % 5)) || rss=$(rss_kb)
		echo "$(awk '/^MemAvailable/ {print $2}' /proc/meminfo) $rss"
		sleep 0.1
	done >"$1"
}
# cg_mem_kb ID: what container ID's memory cgroup is charged, in kB (v1 or v2).
cg_mem_kb() {
	local d
	for d in /sys/fs/cgroup/memory /sys/fs/cgroup; do
		d=$(find "$d" -maxdepth 3 -type d -name "*$1*" 2>/dev/null | head -1)
		[ -n "$d" ] || continue
		if [ -f "$d/memory.usage_in_bytes" ]; then echo $(($(cat "$d/memory.usage_in_bytes") >> 10)); return; fi
		if [ -f "$d/memory.current" ]; then echo $(($(cat "$d/memory.current") >> 10)); return; fi
	done
	echo 0
}
# entry: the image's cache entry, its snapshots' names.
entry() { k snapshots ls 2>/dev/null | awk '$1 ~ /^checkpoint-cache\// {print $1}'; }
# extras: holds, snapshots being built and shims (what a round must not leave).
extras() {
	k snapshots ls 2>/dev/null | awk '$1 ~ /building-|^checkpoint-restore\// {print "snapshot " $1}'
	shims | sed 's/^/shim /'
	local l
	l=$(k leases ls -q 2>/dev/null | wc -l)
	[ "$l" -le "$leases0" ] || echo "leases: $l, $leases0 before the rounds"
}
leases0=$(k leases ls -q 2>/dev/null | wc -l)

# restore KIND N I PORT: one restore of a round, a background job; writes
# $dir/round/I.json: bench-poll.py's record with t0 and the container, or
# {"error": ...}.
restore() {
	local name=load-$1-$2-$3 f=$dir/round/$3 t0 id poller
	python3 "$root/bench/bench-poll.py" "$4" "$prompt" "$timeout" >"$f.poll" 2>&1 &
	poller=$!
	t0=$EPOCHREALTIME
	if ! id=$(n run -d --name "$name" -p "127.0.0.1:$4:30000" "$image" 2>"$f.err"); then
		kill "$poller" 2>/dev/null
		jq -cn --arg n "$name" --arg e "nerdctl run failed: $(tail -2 "$f.err")" '{name: $n, error: $e}' >"$f.json"
		return 1
	fi
	if ! wait "$poller"; then
		jq -cn --arg n "$name" --arg e "$(cat "$f.poll")" '{name: $n, error: $e}' >"$f.json"
		return 1
	fi
	jq -c --arg n "$name" --arg id "$id" --argjson i "$3" --argjson port "$4" --argjson t0 "$t0" \
		'{i: $i, name: $n, container: $id, port: $port, t0: $t0} + .' "$f.poll" >"$f.json"
}

# round KIND N: N restores at once; appends the round's record to
# $dir/rounds.jsonl, removes its containers and checks nothing is left.
round() {
	local kind=$1 count=$2 i mark avail0 t0 jobs=() pp f left wait_s
	if [ "$kind" = new ]; then
		"$root/systemd/rekindle-cache-gc.sh" --address "$sock" --ctr "$bin/ctr" --max-age 0s --max-size 0 >"$dir/gc.log" 2>&1 ||
			die "rekindle-cache-gc.sh failed: $(tail -3 "$dir/gc.log")"
		if [ -n "$(entry | grep -v '/data-view$' || true)" ]; then die "the cache entry is still there after rekindle-cache-gc.sh: $(entry | tr '\n' ' ')"; fi
		if [ "$drop" = 1 ]; then sync; echo 3 >/proc/sys/vm/drop_caches || die "cannot drop the page cache; set BENCH_DROP_CACHES=0"; fi
	fi
	rm -rf "$dir/round" && mkdir "$dir/round"
	read -r -a pp <<<"$(ports "$count")"
	mark=$(($(wc -l <"$dir/containerd.log") + 1))
	avail0=$(awk '/^MemAvailable/ {print $2}' /proc/meminfo)
	sample "$dir/round/mem" &
	sampler=$!
	t0=$EPOCHREALTIME
	for ((i = 1; i <= count; i++)); do
		restore "$kind" "$count" "$i" "${pp[$i - 1]}" &
		jobs+=($!)
	done
	for i in "${jobs[@]}"; do wait "$i" || true; done
	kill "$sampler" 2>/dev/null
	wait "$sampler" 2>/dev/null || true
	sampler=
	jq -s --argjson said "$said" '[.[] | . + {correct: (.error == null and [.text, .output_ids] == $said)}]' \
		"$dir"/round/*.json >"$dir/round/all.json"
	# The engines' own memory (their cgroups' charge), beside MemAvailable,
	# which the host's other work moves too.
	cg_kb=0
	for f in $(jq -r '.[] | .container // empty' "$dir/round/all.json"); do
		cg_kb=$((cg_kb + $(cg_mem_kb "$f")))
	done
	# containerd's cache builds in this round, by what they built.
	builds=$(tail -n +"$mark" "$dir/containerd.log" | { grep -o 'checkpoint cache miss: building [a-z -]* of' || true; } |
		sed 's/checkpoint cache miss: building //; s/ of$//' | jq -R . | jq -sc 'group_by(.) | map({key: .[0], value: length}) | from_entries')
	jq -c --arg kind "$kind" --argjson n "$count" --argjson t0 "$t0" --argjson avail0 "$avail0" \
		--argjson builds "$builds" --argjson cg "$cg_kb" --rawfile mem "$dir/round/mem" '
		def median: sort | if length == 0 then null elif length % 2 == 1 then .[length / 2 | floor]
			else (.[length / 2 - 1] + .[length / 2]) / 2 end;
		($mem | split("\n") | map(select(. != "") | split(" ") | map(tonumber))) as $m |
		[.[] | select(.correct) | .t_answer - .t0] as $s |
		{kind: $kind, n: $n, answered: ($s | length), lost: ($n - ($s | length)),
		 first_answer_s: {min: ($s | min), median: ($s | median), max: ($s | max)},
		 wall_s: (if ($s | length) > 0 then ([.[] | select(.correct) | .t_answer] | max) - $t0 else null end),
		 mem_available_before_kb: $avail0, mem_available_drop_kb: ($avail0 - ([$m[][0]] + [$avail0] | min)),
		 stack_rss_peak_kb: ([$m[][1]] | max), engines_cgroup_kb: $cg, samples: ($m | length),
		 builds: $builds, builds_total: ([$builds[]] | add // 0),
		 errors: [.[] | select(.correct | not) | {name, error, text}],
		 restores: [.[] | {i, name, container, first_answer_s: (if .correct then .t_answer - .t0 else null end), polls}]}' \
		"$dir/round/all.json" >"$dir/round/rec.json"
	# Remove the containers, then nothing of them may be left.
	for f in "$dir"/round/[0-9]*.json; do
		n rm -f "$(jq -r .name "$f")" >/dev/null 2>&1 || true
	done
	wait_s=$SECONDS
	for ((i = 0; i < 150; i++)); do
		# set +e: its greps find nothing when all is well (bats runs it so).
		left=$(
			set +e
			for f in "$dir"/round/[0-9]*.json; do
				what_is_left "$(jq -r .name "$f")" "$(jq -r '.port // 0' "$f")" "$(jq -r '.container // empty' "$f")"
			done
			n ps -aq 2>/dev/null | sed 's/^/container /'
			extras
		)
		[ -n "$left" ] || break
		sleep 0.2
	done
	jq -c --arg left "$left" --argjson w $((SECONDS - wait_s)) '. + {left: ($left | split("\n") | map(select(. != ""))), cleanup_s: $w}' \
		"$dir/round/rec.json" >>"$dir/rounds.jsonl"
	jq -r '"    \(.kind) x\(.n): \(.answered)/\(.n) answered, first answer \(.first_answer_s.min // "-" | if type == "number" then . * 100 | round / 100 else . end)/\(.first_answer_s.median // "-" | if type == "number" then . * 100 | round / 100 else . end)/\(.first_answer_s.max // "-" | if type == "number" then . * 100 | round / 100 else . end)s, wall \(.wall_s // 0 | . * 100 | round / 100)s, MemAvailable -\(.mem_available_drop_kb / 1024 | round) MB, engines \(.engines_cgroup_kb / 1024 | round) MB, builds \(.builds_total), left \(.left | length)"' \
		<<<"$(tail -1 "$dir/rounds.jsonl")" >&2
}

host=$(jq -n --arg nproc "$(nproc)" --arg mem "$(awk '/^MemTotal/ {print $2 * 1024}' /proc/meminfo)" \
	--arg hostname "$(hostname)" --arg load "$(cut -d' ' -f1-3 /proc/loadavg)" \
	'{hostname: $hostname, nproc: ($nproc | tonumber), mem_bytes: ($mem | tonumber), loadavg_at_start: $load}')
started=$(date -u +%Y%m%dT%H%M%SZ)
: >"$dir/rounds.jsonl"
for c in "${ns[@]}"; do
	note "$c restores at once"
	round new "$c"
	round cached "$c"
done

result=$out/load-cpu-$started.json
jq -n --arg started "$started" --arg finished "$(date -u +%Y%m%dT%H%M%SZ)" --argjson host "$host" \
	--argjson state_mb "$state_mb" --arg ns "${ns[*]}" --arg capped "${capped[*]}" \
	--argjson drop "$([ "$drop" = 1 ] && echo true || echo false)" --slurpfile rounds "$dir/rounds.jsonl" \
	'{schema: "rekindle-bench-load/1", engine: "cpu", started: $started, finished: $finished, host: $host,
	  config: {n: ($ns | split(" ") | map(tonumber)), capped_from: ($capped | split(" ") | map(select(. != "") | tonumber)),
	           state_mb: $state_mb, drop_caches: $drop},
	  rounds: $rounds}' >"$result"
table() {
	echo "| N | cache | answered | first answer min / median / max | round wall | MemAvailable drop | engines' cgroups | containerd + shims RSS | builds | left |"
	echo "|---|---|---|---|---|---|---|---|---|---|"
	jq -r 'def s: if . == null then "-" else . * 100 | round | tostring | (if length < 3 then "00" + . | .[-3:] else . end) | .[:-2] + "." + .[-2:] + " s" end;
		.rounds[] | "| \(.n) | \(if .kind == "new" then "new entry" else "cached" end) | \(.answered)/\(.n) | \(.first_answer_s.min | s) / \(.first_answer_s.median | s) / \(.first_answer_s.max | s) | \(.wall_s | s) | \(.mem_available_drop_kb / 1024 | round) MB | \(.engines_cgroup_kb / 1024 | round) MB | \(.stack_rss_peak_kb / 1024 | round) MB | \(.builds_total) | \(if (.left | length) == 0 then "nothing" else .left | join("; ") end) |"' "$result"
}
table >"${result%.json}.md"
cp "$result" "$out/latest-load-cpu.json"
cp "${result%.json}.md" "$out/latest-load-cpu.md"
cat "${result%.json}.md"
note "results: $result (and latest-load-cpu.{json,md} beside it)"
# A new entry is built once whatever N (restore/checkpointimage/cache.go's
# lock), a cached one not at all.
bad=$(jq '[.rounds[] | select(.lost > 0 or (.left | length) > 0 or .builds_total != (if .kind == "new" then 1 else 0 end))] | length' "$result")
[ "$bad" -eq 0 ] || die "$bad round(s) lost a restore, left something, or built the cache entry other than once when new and never when cached: see $result"
