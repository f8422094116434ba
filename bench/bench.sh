#!/usr/bin/env bash
# bench.sh: cold start vs first restore vs cached restore of a reference
# engine, side by side in one run, with the floors the hardware sets,
# measured in the same run. Run by `make bench` (CPU engine); bench/gpu-bench.sh
# runs it for the GPU engine on a GPU host (BENCH_ENGINE=gpu).
#
# Every repetition, in this order, under a private containerd:
#   cold    nerdctl run the engine image -> first /generate answer
#   (checkpoint it with oci-checkpoint create: a new image, so a cold cache)
#   first   nerdctl run the new checkpoint image (extracted-checkpoint cache
#           empty) -> first /generate answer
#   cached  nerdctl run it again (cache filled by `first`) -> first answer
#   preheated  (BENCH_PREHEAT=1) containerd restarted preheating the image
#           (checkpoint_preheat_images), the page cache dropped once it is
#           resident, nerdctl run it again -> first answer; containerd is
#           then restarted without the preheat
#   floors  memcpy bandwidth; disk read of the checkpoint's pages files with
#           the page cache dropped; direct write; (GPU) pinned host-to-device
#           bandwidth
# then the checkpoint image is removed (its cache goes with it).
#
# With BENCH_REPLICAS=N (> 1), after the repetitions: the host filled. One
# more engine is started and checkpointed into an archive, and its image is
# restored, every container in a network namespace of its own (--network
# none: each replica listens on the port the engine had) and polled inside it:
#   one-first   one replica, the image imported anew from the archive (not
#               unpacked, no cache entry) and the page cache dropped
#   one-cached  one replica again
#   all-first   N replicas, `nerdctl run` N times at once, the image imported
#               anew and the page cache dropped again
#   all-cached  N at once again
# A batch's time runs from before its first `nerdctl run` to its last
# replica's first answer; "replicas" in the result holds them, their ratios
# (N at once / one) and every replica's phases.
#
# Phases come from containerd's log (containerd-patches/tasks-log-the-phase-times-of-each-restore-from-a-che: container-setup, criu-restore;
# read by bench-log.py), from the wake helper's /.rekindle/status (woke_at,
# done_at) and from a poller (bench-poll.py) that asks /health every few ms
# from before `nerdctl run` and sends the first /generate the moment the
# engine is healthy. This script only runs them: the measuring tools are
# bench/bench-*.{py,c}, the report bench-report.py.
#
# Environment:
#   BENCH_REPS         repetitions (5)
#   BENCH_ENGINE       cpu | gpu (cpu)
#   BENCH_STATE_MB     CPU engine: ENGINE_STATE_MB, resident memory the checkpoint holds (2000)
#   BENCH_DROP_CACHES  1: drop the page cache before cold start and first restore (1)
#   BENCH_DIR          the private containerd's folder (/tmp/rekindle-bench)
#   BENCH_OUT          where results go (build/bench)
#   BENCH_RUN_FLAGS    extra `nerdctl run` flags (gpu-bench.sh passes the host Python's here)
#   BENCH_DEVICES      the rows' devices, CDI names, comma-separated (gpu-bench.sh: nvidia.com/gpu=0)
#   BENCH_REPLICAS     N > 1: N replicas restored at once, after the repetitions (1: none)
#   BENCH_REPLICA_DEVICES  each replica's devices instead of BENCH_DEVICES: N words, each
#                      comma-separated CDI names (gpu-bench.sh: one GPU each, or one TP group
#                      each); one replica alone gets the last word, the checkpoint the first
#   BENCH_REPLICA_REPS rounds of the four replica batches (1)
#   BENCH_PREHEAT      1: the preheated row above (0)
#   BENCH_PULL         1: a node that has nothing, after the repetitions (bench-pull.sh): the
#                      checkpoint image pushed to a registry on loopback, pulled by a second,
#                      empty containerd root and restored there; "pull" in the result (0)
#   BENCH_PORT         GPU engine: the port it listens on (host network) (30000)
#   BENCH_TASK_STATE_TIMEOUT  containerd's task state timeout for this run (default 120s, see below)
#   BENCH_CHECKPOINT_FLAGS  extra `oci-checkpoint create` flags, shell-quoted
#   BENCH_EXTRA_BANDWIDTH  a command printing a JSON object of more floors, run each repetition
#   BENCH_API          openai: the engine is a vLLM server, sglang: an SGLang server (gpu-bench.sh
#                      sets it), see bench-poll.py
#   REKINDLE_CUDA_CHECKPOINT_LOG  (GPU) cuda-checkpoint's log; its timed steps give each
#                      restore's CUDA restore, inside CRIU restore (gpu-bench.sh sets it)
#
# Output: BENCH_OUT/ENGINE-TIMESTAMP.{json,png,md} and latest-ENGINE.{json,png,md}.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
. "$root/scripts/lib.sh"
need_root
bin=${REKINDLE_BIN:-$root/build/bin}
engine=${BENCH_ENGINE:-cpu}
reps=${BENCH_REPS:-5}
state_mb=${BENCH_STATE_MB:-2000}
drop=${BENCH_DROP_CACHES:-1}
dir=$(realpath -m "${BENCH_DIR:-/tmp/rekindle-bench}")
out=$(realpath -m "${BENCH_OUT:-$root/build/bench}")
images=${BENCH_IMAGES:-$root/build/images}
read -r -a extra_flags <<<"${BENCH_RUN_FLAGS:-}"
dev_flags=()
devs=${BENCH_DEVICES:-}
for d in ${devs//,/ }; do dev_flags+=(--device "$d"); done
replicas=${BENCH_REPLICAS:-1}
preheat=${BENCH_PREHEAT:-0}
rep_reps=${BENCH_REPLICA_REPS:-1}
read -r -a rep_devices <<<"${BENCH_REPLICA_DEVICES:-}"
case "$engine" in
cpu) engine_image=rekindle.local/cpu-engine:latest tars="base cpu-engine" ;;
gpu) engine_image=${BENCH_ENGINE_IMAGE:-rekindle.local/gpu-engine:latest} tars=${BENCH_ENGINE_TAR:-gpu-engine} ;;
*) die "BENCH_ENGINE must be cpu or gpu, not $engine" ;;
esac
[[ $reps =~ ^[1-9][0-9]*$ ]] || die "BENCH_REPS must be a positive integer"
[[ $replicas =~ ^[1-9][0-9]*$ ]] || die "BENCH_REPLICAS must be a positive integer"
[[ $rep_reps =~ ^[1-9][0-9]*$ ]] || die "BENCH_REPLICA_REPS must be a positive integer"
[ ${#rep_devices[@]} -eq 0 ] || [ ${#rep_devices[@]} -eq "$replicas" ] ||
	die "BENCH_REPLICA_DEVICES gives ${#rep_devices[@]} replicas their devices, BENCH_REPLICAS is $replicas"
[ "$replicas" -eq 1 ] || need_tool nsenter
for t in oci-checkpoint rekindle-wake nerdctl containerd ctr; do
	[ -x "$bin/$t" ] || die "$bin/$t is missing: run 'make build' first"
done
for i in $tars; do
	[ -f "$images/$i.tar" ] || die "$images/$i.tar is missing: run 'make images'"
done
need_tool jq python3 dd
# The chart needs Debian's matplotlib, which the system interpreter has
# (python3 on PATH may be another one).
report_py=${BENCH_PYTHON:-/usr/bin/python3}
[ -x "$report_py" ] || report_py=python3

if [ -e "$dir/containerd.pid" ]; then
	note "stopping the containerd an earlier bench left in $dir"
	"$root/scripts/containerd-down.sh" "$dir" >/dev/null 2>&1 || true
fi
rm -rf "$dir"
mkdir -p "$dir" "$out"
cleanup() {
	"$root/scripts/containerd-down.sh" "$dir" >/dev/null 2>&1 || true
}
trap cleanup EXIT
# containerd-config.sh gives task State calls 120 s (a restore answers only
# when CRIU is done; at containerd's default 2 s nerdctl's log driver gives
# up and the restored engine dies on EPIPE). BENCH_TASK_STATE_TIMEOUT=2s
# shows that failure.
state_timeout=${BENCH_TASK_STATE_TIMEOUT:-120s}
CONTAINERD_TASK_STATE_TIMEOUT=$state_timeout "$root/scripts/containerd-up.sh" "$dir"
export CONTAINERD_ADDRESS=$dir/containerd.sock PATH=$bin:$PATH
n() { "$root/scripts/nerdctl.sh" "$dir" "$@"; }
# restart_containerd [VAR=VALUE...]: this run's containerd started again, with VAR=VALUE.
restart_containerd() {
	"$root/scripts/containerd-down.sh" "$dir" >/dev/null
	env CONTAINERD_TASK_STATE_TIMEOUT="$state_timeout" "$@" "$root/scripts/containerd-up.sh" "$dir" >/dev/null
}
# preheated IMAGE: the preheat holds IMAGE resident (a compressed one's decoded pages).
preheated() {
	jq -e --arg i "$1" '.images[] | select(.image == $i and .state == "resident" and (.source | test("compressed") | not))' \
		"$dir/state/io.containerd.service.v1.tasks-service/checkpoint-preheat.json" >/dev/null 2>&1
}
port() { "$root/scripts/free-ports.py"; }
drop_caches() {
	[ "$drop" = 1 ] || return 0
	sync
	echo 3 >/proc/sys/vm/drop_caches 2>/dev/null || die "cannot drop the page cache (echo 3 >/proc/sys/vm/drop_caches); set BENCH_DROP_CACHES=0"
}

note "loading $tars"
for i in $tars; do n load -i "$images/$i.tar" >/dev/null; done

# ---- measuring tools ---------------------------------------------------------

# memcpy bandwidth: bench-memcpy.c when gcc is here, else bench-memcpy.py
# (Python's memmove); both single-threaded, like a page copy.
memcpy_mb=${BENCH_MEMCPY_MB:-1024}
if command -v gcc >/dev/null 2>&1; then
	gcc -O2 -o "$dir/memcpy" "$root/bench/bench-memcpy.c" || die "cannot compile bench/bench-memcpy.c"
	memcpy_bw() { "$dir/memcpy" "$memcpy_mb"; }
else
	memcpy_bw() { python3 "$root/bench/bench-memcpy.py" "$memcpy_mb"; }
fi

# disk_read FILE...: drop the page cache, read the files once; JSON.
disk_read() {
	local bytes t0 t1
	bytes=$(du -cb "$@" | tail -1 | cut -f1)
	sync
	echo 3 >/proc/sys/vm/drop_caches 2>/dev/null || { echo null; return; }
	t0=$EPOCHREALTIME
	cat "$@" | dd of=/dev/null bs=8M status=none
	t1=$EPOCHREALTIME
	awk -v b="$bytes" -v a="$t0" -v z="$t1" 'BEGIN { printf "{\"bytes\": %d, \"seconds\": %.4f, \"gbps\": %.3f}\n", b, z - a, b / (z - a) / 1e9 }'
}

# disk_write: write 1 GiB with O_DIRECT beside containerd's content store,
# where packaging writes the checkpoint layer; JSON.
disk_write() {
	local f=$dir/root/.floor-write t0 t1
	t0=$EPOCHREALTIME
	dd if=/dev/zero of="$f" bs=8M count=128 oflag=direct status=none || { rm -f "$f"; echo null; return; }
	t1=$EPOCHREALTIME
	rm -f "$f"
	awk -v a="$t0" -v z="$t1" 'BEGIN { printf "{\"bytes\": 1073741824, \"seconds\": %.4f, \"gbps\": %.3f}\n", z - a, 1073741824 / (z - a) / 1e9 }'
}

# Extra floors an engine adds: BENCH_EXTRA_BANDWIDTH names a command that
# prints a JSON object (gpu-bench.sh: pinned host-to-device bandwidth).
bench_extra_bandwidth() {
	if [ -n "${BENCH_EXTRA_BANDWIDTH:-}" ]; then
		$BENCH_EXTRA_BANDWIDTH || echo '{}'
	else
		echo '{}'
	fi
}

# cuda-checkpoint's log (GPU): bench-log.py sums its timed steps per restore.
cuda_log=${REKINDLE_CUDA_CHECKPOINT_LOG:-}
cuda_lines() { if [ -n "$cuda_log" ] && [ -f "$cuda_log" ]; then wc -l <"$cuda_log"; else echo 0; fi; }
# bench_log ARGS...: what bench/bench-log.py reads from the run's logs.
bench_log() { python3 "$root/bench/bench-log.py" "$@"; }

# ---- one run -----------------------------------------------------------------

prompt='{"text": "the quick brown fox", "max_new_tokens": 16}'
[ "$engine" = gpu ] && prompt='{"text": "Rekindle restores warm GPU engines in seconds.", "sampling_params": {"max_new_tokens": 32}}'
# BENCH_API=openai: a vLLM server, asked through its OpenAI API (bench-poll.py).
[ "${BENCH_API:-}" = openai ] &&
	prompt='{"model": "/models/model", "prompt": "Rekindle restores warm GPU engines in seconds.", "max_tokens": 32, "temperature": 0, "ignore_eos": true, "return_token_ids": true}'
[ "${BENCH_API:-}" = sglang ] &&
	prompt='{"text": "Rekindle restores warm GPU engines in seconds.", "sampling_params": {"max_new_tokens": 32, "temperature": 0, "ignore_eos": true}}'
timeout=${BENCH_TIMEOUT:-$([ "$engine" = gpu ] && echo 900 || echo 120)}
gpu_port=${BENCH_PORT:-30000}

# run_flags PORT: the `nerdctl run` flags of both the engine and its restores.
run_flags() {
	if [ "$engine" = cpu ]; then
		echo "-p 127.0.0.1:$1:30000"
	else
		echo "--network host"
	fi
}

# measure PATH REP NAME IMAGE [FLAGS...]: nerdctl run IMAGE with the poller
# watching; append the run's record to $dir/runs.jsonl.
measure() {
	local path=$1 rep=$2 name=$3 image=$4
	shift 4
	local p=$gpu_port id t0 t1 poll status="null" cuda="{}" cuda_mark log_mark
	local restore='{"containerd": {}, "restore_begun_at": null, "cache": null}'
	cuda_mark=$(($(cuda_lines) + 1))
	# From here: a pages layer's background decode, which logs a cache miss
	# of its own, ends before the cached row begins.
	log_mark=$(($(wc -l <"$dir/containerd.log") + 1))
	[ "$engine" = cpu ] && p=$(port)
	python3 "$root/bench/bench-poll.py" "$p" "$prompt" "$timeout" >"$dir/poll.json" &
	local poller=$!
	t0=$EPOCHREALTIME
	# shellcheck disable=SC2046
	id=$(n run -d --name "$name" $(run_flags "$p") "${extra_flags[@]}" "${dev_flags[@]}" "$@" "$image") ||
		{ kill "$poller" 2>/dev/null; die "$path: nerdctl run $image failed"; }
	t1=$EPOCHREALTIME
	wait "$poller" || { n logs "$name" 2>&1 | tail -20 >&2; die "$path (rep $rep): $(cat "$dir/poll.json")"; }
	poll=$(cat "$dir/poll.json")
	if [ "$path" != cold ]; then
		status=$(n exec "$name" cat /.rekindle/status) || die "$path: no /.rekindle/status in $name"
		[ "$(jq -r .outcome <<<"$status")" = resumed ] || die "$path: resume failed: $(jq -r .error <<<"$status")"
		# containerd's phase times, when it began the restore, cache hit or miss.
		restore=$(bench_log restore "$dir/containerd.log" "$id" "$log_mark") ||
			die "$path: cannot read containerd's log"
		[ "$(jq -c .containerd <<<"$restore")" != "{}" ] || note "warning: no restore timings for $id in containerd's log"
		cuda=$(bench_log cuda "$cuda_log" "$cuda_mark") || die "$path: cannot read $cuda_log"
	fi
	jq -cn --arg path "$path" --argjson rep "$rep" --arg id "$id" --arg image "$image" \
		--argjson t0 "$t0" --argjson t1 "$t1" --argjson poll "$poll" --argjson status "$status" \
		--argjson restore "$restore" --argjson cuda "$cuda" \
		'{path: $path, rep: $rep, container: $id, image: $image, t0: $t0, t_run_returned: $t1,
		  restore_begun_at: $restore.restore_begun_at, cache: $restore.cache, containerd: $restore.containerd,
		  cuda: $cuda, status: $status} + $poll' \
		>>"$dir/runs.jsonl"
	# A restored engine must answer what it answered before the checkpoint.
	local said
	said=$(jq -c '[.text, .output_ids]' <<<"$poll")
	if [ "$path" = cold ]; then
		cold_said=$said
	elif [ "$said" != "$cold_said" ]; then
		die "$path (rep $rep) answered $said, the engine before the checkpoint $cold_said"
	fi
	jq -r --arg p "$path" '"    \($p): \(if .t_full_answer then "first token" else "first answer" end) after \(.t_answer - .t0 | . * 100 | round / 100)s"' <<<"$(tail -1 "$dir/runs.jsonl")" >&2
}

# ---- the run -----------------------------------------------------------------

host=$(jq -n --arg nproc "$(nproc)" --arg cpu "$(awk -F': ' '/^model name/ {print $2; exit}' /proc/cpuinfo)" \
	--arg kernel "$(uname -r)" --arg mem "$(awk '/^MemTotal/ {print $2 * 1024}' /proc/meminfo)" \
	--arg hostname "$(hostname)" --arg load "$(cut -d' ' -f1-3 /proc/loadavg)" \
	--arg containerd "$("$bin/containerd" --version | awk '{print $3}')" \
	--arg criu "$("$bin/criu" --version 2>/dev/null | awk '/^Version/ {print $2}')" \
	'{hostname: $hostname, nproc: ($nproc | tonumber), cpu_model: $cpu, kernel: $kernel,
	  mem_bytes: ($mem | tonumber), loadavg_at_start: $load, containerd: $containerd, criu: $criu}')
: >"$dir/runs.jsonl"
: >"$dir/checkpoints.jsonl"
: >"$dir/bandwidth.jsonl"
env_flags=()
[ "$engine" = cpu ] && env_flags=(-e "ENGINE_STATE_MB=$state_mb")
started=$(date -u +%Y%m%dT%H%M%SZ)

for rep in $(seq "$reps"); do
	note "repetition $rep of $reps"
	image=rekindle.local/bench-checkpoint:$rep
	drop_caches
	measure cold "$rep" "bench-cold-$rep" "$engine_image" "${env_flags[@]}"

	# shellcheck disable=SC2086 # flags may quote calls: --quiesce 'GET /health'
	eval "ck_flags=(${BENCH_CHECKPOINT_FLAGS:-})"
	oci-checkpoint create --json "${ck_flags[@]}" "bench-cold-$rep" "$image" >"$dir/checkpoint.json" ||
		die "oci-checkpoint create failed"
	jq -c --argjson rep "$rep" '{rep: $rep, image, digest, size, phases}' "$dir/checkpoint.json" >>"$dir/checkpoints.jsonl"
	note "    checkpoint: $(jq -r '[.phases[] | "\(.name) \(.seconds * 100 | round / 100)s"] | join("  ")' "$dir/checkpoint.json")"
	n rm -f "bench-cold-$rep" >/dev/null

	touch "$dir/mark"
	sleep 0.01
	drop_caches
	measure first "$rep" "bench-first-$rep" "$image" "${env_flags[@]}"
	n rm -f "bench-first-$rep" >/dev/null
	# A pages layer's entry gets its decoded copy a few seconds after the
	# first restore ends (docs/operations.md, "Decoded pages"): the cached
	# restore is measured as a host restoring the image again finds it.
	if [ "$(oci-checkpoint inspect --json "$image" | jq -r .compression)" = pages ]; then
		layer=$(oci-checkpoint inspect --json "$image" | jq -r .layer_digest)
		for ((i = 0; i < 600; i++)); do
			grep -q "decoded the pages images of checkpoint layer $layer" "$dir/containerd.log" && break
			sleep 0.2
		done
		note "    $(grep -o "decoded the pages images of checkpoint layer $layer.*for its next restores" "$dir/containerd.log" | tail -1 |
			sed 's/ of checkpoint layer [^,]*//' || echo "no decoded copy of the pages within 120 s: the cached restore decodes")"
	fi
	measure cached "$rep" "bench-cached-$rep" "$image" "${env_flags[@]}"
	n rm -f "bench-cached-$rep" >/dev/null

	# The pages files that this checkpoint's first restore read, and the
	# checkpoint layer they came from: nerdctl run unpacks the layer as a
	# snapshot, which containerd's cache then uses (restore/checkpointimage/unpacked.go);
	# should it extract a copy of its own, take that, the later (higher
	# numbered) snapshot.
	# The collector may be removing the last repetition's snapshots while
	# find walks them: a folder gone under it is not an error here.
	snap=$( { find "$dir/root/io.containerd.snapshotter.v1.overlayfs/snapshots" -xdev -cnewer "$dir/mark" -type f \
		-name 'pages-*.img' -path '*/fs/checkpoint/*' 2>/dev/null || true; } | sed 's|/fs/checkpoint/.*||' | sort -Vu | tail -1)
	mapfile -t pages < <(find "${snap:-/nonexistent}/fs/checkpoint" -name 'pages-*.img' -type f 2>/dev/null)
	layer=$(bench_log layer "$dir/containerd.log")
	blob=$dir/root/io.containerd.content.v1.content/blobs/sha256/${layer#sha256:}
	floor_files=("${pages[@]}")
	if [ ${#pages[@]} -eq 0 ] && [ -n "$layer" ] && [ -f "$blob" ]; then
		# Kept in place (containerd-patches/diff-apply-keep-a-layer-that-asks-for-it-as-an-EROFS, containerd-patches/checkpointimage-read-a-checkpoint-layer-kept-in-plac): CRIU read the pages
		# from the blob through the EROFS mount of the snapshot that links it;
		# the disk's floor is then a cold read of the blob.
		mnt=$(findmnt -rn -t erofs -o TARGET,SOURCE | while read -r t s; do
			[ "$(stat -c %i "$(dirname "$s")/layer.tar" 2>/dev/null)" = "$(stat -c %i "$blob")" ] && echo "$t"
		done | head -1)
		mapfile -t pages < <(find "${mnt:-/nonexistent}/checkpoint" -name 'pages-*.img' -type f 2>/dev/null)
		floor_files=("$blob")
	fi
	[ ${#pages[@]} -gt 0 ] || die "no pages-*.img extracted or mounted in place under $dir/root for $image"
	layer_bytes=null
	[ -n "$layer" ] && [ -f "$blob" ] && layer_bytes=$(stat -c %s "$blob")
	pages_bytes=$(du -cb "${pages[@]}" | tail -1 | cut -f1)
	mem=$(memcpy_bw)
	disk=$(disk_read "${floor_files[@]}")
	dwrite=$(disk_write)
	extra=$(bench_extra_bandwidth)
	jq -cn --argjson rep "$rep" --argjson pages "$pages_bytes" --argjson layer "$layer_bytes" \
		--argjson memcpy "$mem" --argjson disk "$disk" --argjson dwrite "$dwrite" --argjson extra "$extra" \
		'{rep: $rep, pages_bytes: $pages, layer_bytes: $layer, pages_files: '"${#pages[@]}"',
		  memcpy: $memcpy, disk_read: $disk, disk_write: $dwrite} + $extra' >>"$dir/bandwidth.jsonl"
	note "    floors: memcpy $(jq -r .warm_gbps <<<"$mem") GB/s (fresh pages $(jq -r .fresh_gbps <<<"$mem")), disk read $(jq -r '.gbps // "n/a"' <<<"$disk") GB/s of $((pages_bytes >> 20)) MiB pages, direct write $(jq -r '.gbps // "n/a"' <<<"$dwrite") GB/s"
	# After the floors, which find the pages where the restores left them.
	if [ "$preheat" = 1 ]; then
		restart_containerd CONTAINERD_PREHEAT_IMAGES="[\"$image\"]" CONTAINERD_PREHEAT_INTERVAL=1s
		for ((i = 0; i < 600; i++)); do preheated "$image" && break; sleep 1; done
		preheated "$image" || die "the preheat did not hold $image within 600 s: see $dir/containerd.log"
		note "    $(grep -o "checkpoint preheat: checkpoint image $image is resident: .*" "$dir/containerd.log" | tail -1 | sed 's/"$//')"
		drop_caches
		measure preheated "$rep" "bench-preheated-$rep" "$image" "${env_flags[@]}"
		n rm -f "bench-preheated-$rep" >/dev/null
		restart_containerd
	fi
	n rmi -f "$image" >/dev/null
done

# ---- replicas: the host filled from one checkpoint image ----------------------

rep_image=rekindle.local/bench-replicas:latest
rep_archive=$dir/replicas.tar
# Each replica listens where the engine did, in a namespace of its own.
rep_port=$([ "$engine" = cpu ] && echo 30000 || echo "$gpu_port")

# replica_flags I: rflags, the `nerdctl run` flags of replica I (1-based):
# the rows' flags with its own devices instead of theirs.
replica_flags() {
	local d
	rflags=(--network none "${extra_flags[@]}" "${env_flags[@]}")
	if [ ${#rep_devices[@]} -eq 0 ]; then
		rflags+=("${dev_flags[@]}") # every replica on the rows' devices
		return 0
	fi
	for d in ${rep_devices[$1 - 1]//,/ }; do rflags+=(--device "$d"); done
}

# poll_in NAME: bench-poll.py inside container NAME's network namespace.
poll_in() {
	local pid
	pid=$(n inspect -f '{{.State.Pid}}' "$1") || { echo '{"error": "no pid"}'; return 1; }
	nsenter -t "$pid" -n python3 "$root/bench/bench-poll.py" "$rep_port" "$prompt" "$timeout"
}

# replica PATH ROUND I: replica I of a batch, run as a background job:
# nerdctl run -d, then poll_in; writes $dir/batch/I.json, bench-poll.py's
# record or {"error": ...}.
replica() {
	local name=bench-$1-$2-$3 out=$dir/batch/$3.json id t1
	replica_flags "$3"
	if ! id=$(n run -d --name "$name" "${rflags[@]}" "$rep_image" 2>"$out.err"); then
		jq -cn --arg e "nerdctl run failed: $(tail -2 "$out.err")" '{error: $e}' >"$out"
		return 1
	fi
	t1=$EPOCHREALTIME
	if ! poll_in "$name" >"$out.poll"; then
		jq -cn --arg e "$(cat "$out.poll")" '{error: $e}' >"$out"
		return 1
	fi
	jq -c --arg id "$id" --arg name "$name" --argjson t1 "$t1" --argjson i "$3" \
		'{replica: $i, name: $name, container: $id, t_run_returned: $t1} + .' "$out.poll" >"$out"
}

# batch PATH ROUND COUNT: COUNT replicas started at once (one: the last
# replica's devices; more: replicas 1 to COUNT), each checked as measure
# checks a restore; appends each one's record to $dir/replicas.jsonl and the
# batch's to $dir/replica-batches.jsonl, then removes them.
batch() {
	local path=$1 round=$2 count=$3 t0 k i jobs=() names=() cuda_mark mark f rec status restore said last
	cuda_mark=$(($(cuda_lines) + 1))
	mark=$(($(wc -l <"$dir/containerd.log") + 1))
	rm -rf "$dir/batch" && mkdir "$dir/batch"
	t0=$EPOCHREALTIME
	for ((k = 1; k <= count; k++)); do
		i=$k
		[ "$count" -gt 1 ] || i=$replicas
		replica "$path" "$round" "$i" &
		jobs+=($!)
		names+=("bench-$path-$round-$i")
	done
	for k in "${!jobs[@]}"; do
		wait "${jobs[$k]}" || true
	done
	for k in "${!names[@]}"; do
		f=$dir/batch/${names[$k]##*-}.json
		rec=$(cat "$f" 2>/dev/null) || die "$path (round $round): ${names[$k]} left no record"
		[ -z "$(jq -r '.error // empty' <<<"$rec")" ] || die "$path (round $round), ${names[$k]}: $(jq -r .error <<<"$rec")"
		status=$(n exec "$(jq -r .name <<<"$rec")" cat /.rekindle/status) || die "$path: no /.rekindle/status in $(jq -r .name <<<"$rec")"
		[ "$(jq -r .outcome <<<"$status")" = resumed ] || die "$path: resume failed: $(jq -r .error <<<"$status")"
		restore=$(bench_log restore "$dir/containerd.log" "$(jq -r .container <<<"$rec")" "$mark") ||
			die "$path: cannot read containerd's log"
		said=$(jq -c '[.text, .output_ids]' <<<"$rec")
		[ "$said" = "$rep_said" ] || die "$path (round $round) answered $said, the engine before the checkpoint $rep_said"
		i=$(jq -r .replica <<<"$rec")
		# Each replica's own cuda-checkpoint steps cannot be told apart in
		# the shared log: the batch gets their sum.
		jq -cn --arg path "$path" --argjson round "$round" --argjson t0 "$t0" --argjson rec "$rec" \
			--argjson status "$status" --argjson restore "$restore" --arg devices "${rep_devices[$i - 1]:-}" \
			'{path: $path, round: $round, devices: ($devices | split(",") | map(select(. != ""))), t0: $t0,
			  restore_begun_at: $restore.restore_begun_at, cache: $restore.cache, containerd: $restore.containerd,
			  cuda: {}, status: $status} + $rec' >>"$dir/replicas.jsonl"
	done
	last=$(jq -s 'map(.t_answer) | max' "$dir"/batch/*.json)
	jq -cn --arg path "$path" --argjson round "$round" --argjson count "$count" --argjson t0 "$t0" \
		--argjson last "$last" --argjson cuda "$(bench_log cuda "$cuda_log" "$cuda_mark")" \
		'{path: $path, round: $round, count: $count, t0: $t0, t_last_answer: $last, seconds: ($last - $t0), cuda: $cuda}' \
		>>"$dir/replica-batches.jsonl"
	note "    $path: $count at once, the last answer after $(awk -v a="$t0" -v b="$last" 'BEGIN { printf "%.2f", b - a }')s (each: $(jq -rs --argjson t0 "$t0" 'sort_by(.replica) | map(.t_answer - $t0 | . * 100 | round / 100 | tostring + "s") | join(" ")' "$dir"/batch/*.json))"
	for f in "${names[@]}"; do n rm -f "$f" >/dev/null; done
}

# fresh_image: the replicas' image as a first restore finds it: removed with
# its cache entries (oci-checkpoint rm returns once containerd's collector
# has freed them), imported anew without being unpacked (nerdctl run unpacks
# it, as it does an image just made or pulled), and the page cache dropped.
fresh_image() {
	if n image inspect "$rep_image" >/dev/null 2>&1; then
		oci-checkpoint rm "$rep_image" >/dev/null || die "oci-checkpoint rm $rep_image failed"
	fi
	ctr images import --no-unpack "$rep_archive" >/dev/null || die "ctr images import $rep_archive failed"
	drop_caches
}

# replica_phase: the four batches, BENCH_REPLICA_REPS times; prints the
# result's "replicas" object. Run as a job of its own (where set -e still
# holds, as it would not in an if): when it fails, the rows measured before
# are still written.
replica_phase() {
	local round
	drop_caches
	replica_flags 1
	n run -d --name bench-rep-cold "${rflags[@]}" "$engine_image" >/dev/null || die "nerdctl run $engine_image failed"
	poll_in bench-rep-cold >"$dir/poll.json" ||
		{ n logs bench-rep-cold 2>&1 | tail -20 >&2; die "replicas' engine: $(cat "$dir/poll.json")"; }
	rep_said=$(jq -c '[.text, .output_ids]' "$dir/poll.json")
	# shellcheck disable=SC2086 # flags may quote calls: --quiesce 'GET /health'
	eval "ck_flags=(${BENCH_CHECKPOINT_FLAGS:-})"
	oci-checkpoint create --json "${ck_flags[@]}" --output "oci-archive:$rep_archive" bench-rep-cold "$rep_image" \
		>"$dir/replica-checkpoint.json" || die "oci-checkpoint create failed"
	n rm -f bench-rep-cold >/dev/null
	for round in $(seq "$rep_reps"); do
		fresh_image
		batch one-first "$round" 1
		batch one-cached "$round" 1
		fresh_image
		batch all-first "$round" "$replicas"
		batch all-cached "$round" "$replicas"
	done
	oci-checkpoint rm "$rep_image" >/dev/null
	rm -f "$rep_archive"
	jq -n --argjson n "$replicas" --argjson reps "$rep_reps" --arg devices "${BENCH_REPLICA_DEVICES:-}" \
		--slurpfile runs "$dir/replicas.jsonl" --slurpfile batches "$dir/replica-batches.jsonl" \
		--slurpfile ck "$dir/replica-checkpoint.json" '
		def median: sort | if length == 0 then null elif length % 2 == 1 then .[length / 2 | floor]
			else (.[length / 2 - 1] + .[length / 2]) / 2 end;
		def secs(p): [$batches[] | select(.path == p) | .seconds] | median;
		def ratio(a; b): if a == null or b == null or b == 0 then null else a / b end;
		secs("all-first") as $af | secs("all-cached") as $ac | secs("one-first") as $of | secs("one-cached") as $oc |
		{n: $n, reps: $reps, devices: ($devices | split(" ") | map(select(. != "") | split(","))),
		 first_all_s: $af, cached_all_s: $ac, first_one_s: $of, cached_one_s: $oc,
		 ratio_first: ratio($af; $of), ratio_cached: ratio($ac; $oc), target_ratio: 1.5,
		 checkpoint: ($ck[0] | {digest, size, phases}), batches: $batches, runs: $runs}'
}

: >"$dir/replicas.jsonl"
: >"$dir/replica-batches.jsonl"
replicas_json=null
if [ "$replicas" -gt 1 ]; then
	note "replicas: $replicas at once from one checkpoint image, against one"
	replica_phase >"$dir/replicas.json" 2> >(tee "$dir/replicas.err" >&2) &
	if wait $!; then
		replicas_json=$(cat "$dir/replicas.json")
		note "    $replicas at once / one: first $(jq -r '.ratio_first * 100 | round / 100' <<<"$replicas_json")x, cached $(jq -r '.ratio_cached * 100 | round / 100' <<<"$replicas_json")x (target <= 1.5x)"
	else
		note "warning: the replicas were not measured; the rows are kept"
		sleep 0.2 # tee's last lines
		replicas_json=$(jq -n --argjson n "$replicas" --arg e "$(grep 'error:' "$dir/replicas.err" | tail -1)" '{n: $n, error: $e}')
		for c in $(n ps -a --format '{{.Names}}' | grep -E '^bench-(rep-cold|one-|all-)'); do
			n rm -f "$c" >/dev/null 2>&1 || true
		done
	fi
fi

pull_json=null
if [ "${BENCH_PULL:-0}" = 1 ]; then
	# shellcheck source=bench/bench-pull.sh
	. "$root/bench/bench-pull.sh"
	note "pull: a second containerd root pulls the checkpoint image from a registry on loopback and restores it"
	pull_phase >"$dir/pull.json" 2> >(tee "$dir/pull.err" >&2) &
	if wait $!; then
		pull_json=$(cat "$dir/pull.json")
		note "    $(jq -r '"pull \(.pull_s * 100 | round / 100)s + restore \(.restore_s * 100 | round / 100)s = \(.total_s * 100 | round / 100)s, \(.ratio * 100 | round / 100)x the cold start (\(.cold_s * 100 | round / 100)s; target <= 0.2x)"' <<<"$pull_json")"
	else
		note "warning: the pull was not measured; the rows are kept"
		sleep 0.2 # tee's last lines
		pull_json=$(jq -n --arg e "$(grep 'error:' "$dir/pull.err" | tail -1)" '{error: $e}')
	fi
fi

result=$out/$engine-$started.json
jq -n --arg engine "$engine" --arg started "$started" --arg finished "$(date -u +%Y%m%dT%H%M%SZ)" \
	--argjson host "$host" --arg image "$engine_image" \
	--argjson reps "$reps" --argjson state_mb "$([ "$engine" = cpu ] && echo "$state_mb" || echo null)" \
	--argjson drop "$([ "$drop" = 1 ] && echo true || echo false)" \
	--arg cmd "${BENCH_COMMAND:-$(realpath --relative-to="$root" "$0") (BENCH_REPS=$reps)}" \
	--arg flags "${dev_flags[*]}${dev_flags[*]:+ }${BENCH_RUN_FLAGS:-}" --arg st "$state_timeout" \
	--argjson replicas "$replicas_json" --argjson pull "$pull_json" \
	--slurpfile runs "$dir/runs.jsonl" --slurpfile checkpoints "$dir/checkpoints.jsonl" \
	--slurpfile bandwidth "$dir/bandwidth.jsonl" \
	'{schema: "rekindle-bench/1", engine: $engine, started: $started, finished: $finished, command: $cmd,
	  host: $host,
	  config: {reps: $reps, engine_image: $image, state_mb: $state_mb, drop_caches: $drop, run_flags: $flags,
	          containerd_task_state_timeout: $st},
	  runs: $runs, checkpoints: $checkpoints, bandwidth: $bandwidth}
	 + (if $replicas == null then {} else {replicas: $replicas} end)
	 + (if $pull == null then {} else {pull: $pull} end)' >"$result"
"$report_py" "$root/bench/bench-report.py" "$result" \
	--png "${result%.json}.png" --markdown "${result%.json}.md" ||
	note "warning: bench-report.py failed; the raw result is kept: make the report elsewhere with bench/bench-report.py $result"
for f in json png md; do
	[ -f "${result%.json}.$f" ] && cp "${result%.json}.$f" "$out/latest-$engine.$f"
done
[ -f "${result%.json}.md" ] && cat "${result%.json}.md"
note "results: $result (and latest-$engine.{json,png,md} beside it)"
