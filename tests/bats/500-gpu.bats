#!/usr/bin/env bats
# GPU: the GPU reference engine (images/gpu-engine/) checkpointed with
# `oci-checkpoint create --engine sglang` and restored with a plain
# `nerdctl run --device nvidia.com/gpu=N CHECKPOINT-IMAGE`: same process,
# weights reloaded after the wake, identical greedy tokens. With two GPUs the
# restore moves it from GPU 1 to GPU 0, and one replica per GPU is restored
# from one checkpoint image at once (the host filled), timed against one. A
# restore onto a GPU another process has filled fails at once, naming CUDA's
# error, and leaves nothing on the GPU.
#
# Runs on a GPU host (tests/gpu/run.sh: CDI spec, CRIU's CUDA plugin, io_uring
# off); everywhere else every test skips and says why. The container runs the
# host's Python + PyTorch, bound in as images/gpu-engine/host-python.sh says;
# torch_memory_saver comes from that Python or from a wheel in
# $REKINDLE_WHEELS (default: the repo's .whl/).
#
#   REKINDLE_GPU_ENGINE_GB   model size (default 4)
#   REKINDLE_HF_ENGINE_GB    model size of the hf-engine (transformers, torch.compile; default 1)
#   REKINDLE_HF_BATCH_SIZES  its decode batch sizes, each compiled and captured (image default: 1,2,4)
#   REKINDLE_GPU_COLD_TIMEOUT  seconds a cold start may take before the test fails (900)
#   REKINDLE_GPU_WEIGHTS     host folder for the weights files (default /var/tmp/rekindle-weights),
#                            kept between runs: a second run loads instead of generating
#   REKINDLE_PYTHON          host interpreter with torch (default python3)
#   REKINDLE_GPU_REPLICAS    replicas restored at once (default: one per GPU, at most 8)

load helpers
load gpu

GPU_IMAGE=rekindle.local/gpu-engine:latest
HF_IMAGE=rekindle.local/hf-engine:latest
ENGINE_FLAGS=()
PROMPT='{"text": "Rekindle restores warm GPU engines in seconds.", "sampling_params": {"max_new_tokens": 32}}'
GPU_GB=${REKINDLE_GPU_ENGINE_GB:-4}
WEIGHTS=${REKINDLE_GPU_WEIGHTS:-/var/tmp/rekindle-weights}
HOST_PY=${REKINDLE_PYTHON:-python3}

# Nothing here touches the GPU or starts the stack: that happens in the first
# test that gets past its skip (gpu_setup), so a host without a GPU only skips.
teardown_file() {
	if [ -f "$BATS_FILE_TMPDIR/stack-up" ]; then
		RK_DIR=$BATS_FILE_TMPDIR/rk stack_down
	fi
	local sets=$BATS_FILE_TMPDIR/sets
	if mountpoint -q "$sets" 2>/dev/null; then
		umount "$sets" || umount -l "$sets"
	fi
}

teardown() {
	# A checkpoint archive is the image's size: gone even when the run keeps
	# its temporary files (tests/gpu/run.sh does).
	rm -f "$BATS_TEST_TMPDIR/ckpt.tar"
	[ ! -f "$BATS_TEST_TMPDIR/hog.pid" ] || kill "$(cat "$BATS_TEST_TMPDIR/hog.pid")" 2>/dev/null || true
	remove_listed "${RK_DIR:-$BATS_FILE_TMPDIR/rk}"
}

skip_if_no_gpu_stack() {
	compgen -G '/etc/cdi/*.yaml' >/dev/null || compgen -G '/var/run/cdi/*.yaml' >/dev/null ||
		skip "no CDI spec for nvidia.com/gpu in /etc/cdi: run 'nvidia-ctk cdi generate --output=/etc/cdi/nvidia.yaml' (tests/gpu/run.sh does)"
	"$HOST_PY" -c 'import torch' 2>/dev/null ||
		skip "$HOST_PY has no torch: the GPU engine runs the host's Python + PyTorch (set REKINDLE_PYTHON)"
}

# gpu_setup: once per file: the private containerd, the image, torch_memory_saver
# for the host Python, and the flags that bind that Python into the container.
gpu_setup() {
	export RK_DIR=$BATS_FILE_TMPDIR/rk
	local site=$BATS_FILE_TMPDIR/site
	if [ ! -f "$BATS_FILE_TMPDIR/stack-up" ]; then
		if ! "$HOST_PY" -c 'import torch_memory_saver' 2>/dev/null; then
			local wheels=${REKINDLE_WHEELS:-$REKINDLE_ROOT/.whl} whl
			whl=$(ls "$wheels"/torch_memory_saver-*.whl 2>/dev/null | tail -1)
			[ -n "$whl" ] || skip "torch_memory_saver is not installed for $HOST_PY and no wheel in $wheels (images/README.md says how to fetch it)"
			run_cmd "$HOST_PY" -m pip install -q --no-index --no-deps --no-compile --target "$site" "$whl"
		fi
		stack_up
		touch "$BATS_FILE_TMPDIR/stack-up"
		local tar
		for tar in "$IMAGES/gpu-engine.tar" "$BIN/../images/gpu-engine.tar"; do
			[ -f "$tar" ] && break
		done
		[ -f "$tar" ] || die "gpu-engine.tar is in neither $IMAGES nor $BIN/../images: run 'make build/images/gpu-engine.tar' (scripts/gpu-bundle.sh packs it)"
		run_nerdctl load -i "$tar"
		[ ! -f "$(dirname "$tar")/hf-engine.tar" ] || run_nerdctl load -i "$(dirname "$tar")/hf-engine.tar"
		mkdir -p "$WEIGHTS"
		PYTHONPATH=${site}${PYTHONPATH:+:$PYTHONPATH} "$REKINDLE_ROOT/images/gpu-engine/host-python.sh" "$(command -v "$HOST_PY")" \
			>"$BATS_FILE_TMPDIR/pyflags" || die "host-python.sh failed"
		say "host Python in the container: $(tr '\n' ' ' <"$BATS_FILE_TMPDIR/pyflags")"
	fi
	mapfile -t PYFLAGS <"$BATS_FILE_TMPDIR/pyflags"
}

gpu_uuid() {
	nvidia-smi -i "$1" --query-gpu=uuid --format=csv,noheader | tr -d ' '
}

# run_gpu_engine NAME GPU PORT IMAGE: nerdctl run -d on GPU (CDI), the host
# Python and the weights folder bound in (and $ENGINE_FLAGS, e.g. a weight
# set), listening on PORT. Host network (ENGINE_NETWORK=none: a namespace
# of its own, with only loopback): GPU machines may lack the iptables that
# nerdctl's bridge network needs, and the restored engine keeps listening on
# the port it was checkpointed with.
run_gpu_engine() {
	local name=$1 gpu=$2 port=$3 image=$4
	echo "$name" >>"$BATS_TEST_TMPDIR/containers"
	run_nerdctl run -d --name "$name" --device "nvidia.com/gpu=$gpu" --network "${ENGINE_NETWORK:-host}" \
		"${PYFLAGS[@]}" --volume="$WEIGHTS:/weights" --env="ENGINE_PARAMS_GB=$GPU_GB" \
		--env="ENGINE_PORT=$port" "${ENGINE_FLAGS[@]}" "$image"
}

wake_recorded() {
	"$REKINDLE_ROOT/scripts/nerdctl.sh" "$RK_DIR" exec "$1" cat /.rekindle/status 2>/dev/null | grep -q '"outcome"'
}

# roundtrip FROM TO [TAG]: engine on GPU FROM, generate, checkpoint, remove,
# restore on GPU TO, wait for the wake, generate again; checks and prints
# the phase times. Leaves /state before and after in $BATS_TEST_TMPDIR.
roundtrip() {
	local from=$1 to=$2 tag=${3:-}
	local name=gpu-eng-$from-$to$tag image=rekindle.local/ckpt:gpu-$from-$to$tag t
	local port port2
	port=$(free_port)

	t=$EPOCHREALTIME
	run_gpu_engine "$name" "$from" "$port" "${IMAGE_UNDER_TEST:-$GPU_IMAGE}"
	wait_for "the GPU engine on port $port to be healthy" "${REKINDLE_GPU_COLD_TIMEOUT:-900}" engine GET "$port" /health
	local cold
	cold=$(awk -v a="$t" -v b="$EPOCHREALTIME" 'BEGIN { printf "%.2f", b - a }')
	engine GET "$port" /state >"$BATS_TEST_TMPDIR/state0.json"
	say "cold start on GPU $from (${GPU_GB} GB, nerdctl run -> healthy ${cold}s): $(jq -c .cold_start "$BATS_TEST_TMPDIR/state0.json")"
	is "$(jq -r .gpu_uuid "$BATS_TEST_TMPDIR/state0.json")" "$(gpu_uuid "$from")" "the engine runs on GPU $from"

	local before after
	before=$(engine POST "$port" /generate "$PROMPT" | jq -c .output_ids)
	[ -n "$before" ] && [ "$before" != null ] || die "no tokens before the checkpoint"
	local batch_before=
	if [ -n "${COMPLETIONS:-}" ]; then
		batch_before=$(engine POST "$port" /v1/completions "$COMPLETIONS" | jq -c '[.choices[].token_ids]')
	fi

	echo "$image" >>"$BATS_TEST_TMPDIR/images"
	t=$EPOCHREALTIME
	run_cmd bash -c '"$@" >"$CK_JSON"' _ "$BIN/oci-checkpoint" --address "$RK_DIR/containerd.sock" \
		--namespace default create --engine sglang --port "$port" --json "$name" "$image"
	local ck_wall
	ck_wall=$(awk -v a="$t" -v b="$EPOCHREALTIME" 'BEGIN { printf "%.2f", b - a }')
	say "$(grep -m1 '^==> checkpoint:' <<<"$output") (wall ${ck_wall}s)"
	say "checkpoint image: $(jq -r '"\(.image) \(.size / 1048576 | floor) MiB"' "$CK_JSON")"
	run_nerdctl rm -f "$name"

	port2=$port
	t=$EPOCHREALTIME
	run_gpu_engine "$name-r" "$to" "$port2" "$image"
	local run_wall
	run_wall=$(awk -v a="$t" -v b="$EPOCHREALTIME" 'BEGIN { printf "%.2f", b - a }')
	wait_for "the wake helper to record its outcome in $name-r" 600 wake_recorded "$name-r"
	local woke
	woke=$(awk -v a="$t" -v b="$EPOCHREALTIME" 'BEGIN { printf "%.2f", b - a }')
	run_nerdctl exec "$name-r" cat /.rekindle/status
	local status=$output
	is "$(jq -r .outcome <<<"$status")" "resumed" "wake outcome (/.rekindle/status: $status)"
	wait_for "the restored engine to be healthy" 120 engine GET "$port2" /health
	t=$EPOCHREALTIME
	after=$(engine POST "$port2" /generate "$PROMPT" | jq -c .output_ids)
	local first
	first=$(awk -v a="$t" -v b="$EPOCHREALTIME" 'BEGIN { printf "%.2f", b - a }')
	engine GET "$port2" /state >"$BATS_TEST_TMPDIR/state1.json"
	say "restore on GPU $to: nerdctl run ${run_wall}s, woken after ${woke}s (resume $(jq -r .resume_seconds <<<"$status")s; engine: $(jq -c .last_resume "$BATS_TEST_TMPDIR/state1.json")), first generate ${first}s"

	is "$after" "$before" "greedy tokens after the restore"
	if [ -n "${COMPLETIONS:-}" ]; then
		is "$(engine POST "$port2" /v1/completions "$COMPLETIONS" | jq -c '[.choices[].token_ids]')" "$batch_before" \
			"a batch through /v1/completions after the restore"
	fi
	local s0=$BATS_TEST_TMPDIR/state0.json s1=$BATS_TEST_TMPDIR/state1.json
	is "$(jq -r .start_time "$s1")" "$(jq -r .start_time "$s0")" "same engine process: restored, not restarted"
	is "$(jq -r .pid "$s1")" "$(jq -r .pid "$s0")" "same pid in the container"
	is "$(jq -r .loaded_checksum "$s1")" "$(jq -r .weights_checksum "$s0")" "weights reloaded intact"
	is "$(jq -r .gpu_uuid "$s1")" "$(gpu_uuid "$to")" "the restored engine runs on GPU $to"
	is "$(jq -r '.resumes >= 1' "$s1")" "true" "the engine was resumed by the wake helper"
}

# bats test_tags=gpu
@test "gpu-engine: checkpoint with oci-checkpoint, restore with nerdctl run, same tokens" {
	skip_if_no_gpu
	skip_if_no_gpu_stack
	gpu_setup
	export CK_JSON=$BATS_TEST_TMPDIR/ck.json
	roundtrip 0 0
}

# bats test_tags=gpu
@test "gpu-engine: checkpoint on GPU 1, restore on GPU 0 (remap), same tokens" {
	skip_if_fewer_gpus 2
	skip_if_no_gpu_stack
	gpu_setup
	export CK_JSON=$BATS_TEST_TMPDIR/ck.json
	roundtrip 1 0
}

# gpu_hog GPU FREE_MIB: a process of the host Python holding all but
# FREE_MIB of GPU's memory until killed; prints its pid once it holds it.
gpu_hog() {
	local out=$BATS_TEST_TMPDIR/hog.out
	CUDA_VISIBLE_DEVICES=$1 "$HOST_PY" -c '
import sys, time, torch
free, _ = torch.cuda.mem_get_info(0)
x = torch.empty(free - int(sys.argv[1]) * 2**20, dtype=torch.uint8, device="cuda:0")
print("holding", x.numel() >> 20, "MiB", flush=True)
time.sleep(3600)' "$2" >"$out" 2>&1 &
	echo $! | tee "$BATS_TEST_TMPDIR/hog.pid"
	wait_for "a process to hold GPU $1's memory" 120 grep -q '^holding' "$out"
}

# bats test_tags=gpu
@test "gpu-engine: a restore onto a GPU whose memory another process holds fails, naming CUDA's error, and leaves nothing running; once the GPU is free the image restores" {
	skip_if_no_gpu
	skip_if_no_gpu_stack
	gpu_setup
	local name=gpu-eng-full image=rekindle.local/ckpt:gpu-full port before hog t elapsed
	port=$(free_port)
	run_gpu_engine "$name" 0 "$port" "$GPU_IMAGE"
	wait_for "the GPU engine on port $port to be healthy" "${REKINDLE_GPU_COLD_TIMEOUT:-900}" engine GET "$port" /health
	before=$(engine POST "$port" /generate "$PROMPT" | jq -c .output_ids)
	echo "$image" >>"$BATS_TEST_TMPDIR/images"
	run_cmd "$BIN/oci-checkpoint" --address "$RK_DIR/containerd.sock" --namespace default create --engine sglang \
		--port "$port" "$name" "$image"
	run_nerdctl rm -f "$name"

	hog=$(gpu_hog 0 64)
	say "$(cat "$BATS_TEST_TMPDIR/hog.out") of GPU 0 held by pid $hog"
	echo "$name-r" >>"$BATS_TEST_TMPDIR/containers"
	t=$EPOCHREALTIME
	run_nerdctl '?' run -d --name "$name-r" --device nvidia.com/gpu=0 --network host "${PYFLAGS[@]}" \
		--volume="$WEIGHTS:/weights" --env="ENGINE_PARAMS_GB=$GPU_GB" --env="ENGINE_PORT=$port" "$image"
	elapsed=$(awk -v a="$t" -v b="$EPOCHREALTIME" 'BEGIN { printf "%.2f", b - a }')
	local failed=$status out=$output
	say "nerdctl run onto the full GPU: status $failed after ${elapsed}s"
	only_hog() { [ -z "$(nvidia-smi --query-compute-apps=pid --format=csv,noheader | tr -d ' ' | grep -vx "$hog")" ]; }
	wait_for "GPU 0 to hold no process but the one filling it (nvidia-smi)" 30 only_hog
	kill "$hog"
	[ "$failed" -ne 0 ] || die "nerdctl run restored onto a GPU without room for the checkpoint's memory"
	[[ $out == *"restore of pid"*"failed"* ]] || die "the error does not name the failed CUDA restore: $out"
	[[ $out == *CUDA_ERROR* ]] || die "the error does not give CUDA's error: $out"
	run_nerdctl ps -q --filter "name=$name-r"
	is "$output" "" "no container running"

	run_nerdctl '?' rm -f "$name-r"
	run_gpu_engine "$name-r2" 0 "$port" "$image"
	wait_for "the wake helper to record its outcome in $name-r2" 600 wake_recorded "$name-r2"
	wait_for "the restored engine to be healthy" 120 engine GET "$port" /health
	is "$(engine POST "$port" /generate "$PROMPT" | jq -c .output_ids)" "$before" "greedy tokens once the GPU is free"
}

# weight_set: the engine's weights file (made on the host when no earlier
# test left one) as a weight set laid out as rekindle-weights does: a tmpfs
# mounted huge=within_size, the file in SETS/NAME, rekindle-set.json last.
# Prints the set's folder.
weight_set() {
	local sets=$BATS_FILE_TMPDIR/sets cfg name file
	cfg=$(ENGINE_PARAMS_GB=$GPU_GB "$HOST_PY" "$REKINDLE_ROOT/images/gpu-engine/server.py" config)
	name=$(jq -r .model_id <<<"$cfg")
	file=$WEIGHTS/$(basename "$(jq -r .weights_path <<<"$cfg")")
	if [ ! -f "$file" ]; then
		ENGINE_PARAMS_GB=$GPU_GB ENGINE_WEIGHTS_DIR=$WEIGHTS ENGINE_MEMORY_SAVER=0 \
			"$HOST_PY" "$REKINDLE_ROOT/images/gpu-engine/server.py" make-weights >&2 || die "server.py make-weights failed"
	fi
	mkdir -p "$sets"
	mountpoint -q "$sets" || mount -t tmpfs -o "huge=within_size,size=$((GPU_GB + 2))g,mode=0755" rekindle-sets "$sets" >&2 ||
		die "cannot mount a tmpfs with huge=within_size on $sets"
	if [ ! -f "$sets/$name/rekindle-set.json" ]; then
		mkdir -p "$sets/$name"
		cp "$file" "$sets/$name/model.safetensors"
		jq -n --arg name "$name" --argjson size "$(stat -c %s "$file")" --arg src "$file" \
			'{name: $name, files: [{name: "model.safetensors", size: $size}], bytes: $size,
			  loaded_at: (now | todate), sources: [$src]}' >"$sets/$name/rekindle-set.json"
	fi
	echo "$sets/$name"
}

# bats test_tags=gpu
@test "gpu-engine: weights from a weight set, mapped once and kept across checkpoint and restore" {
	skip_if_no_gpu
	skip_if_no_gpu_stack
	gpu_setup
	export CK_JSON=$BATS_TEST_TMPDIR/ck.json
	local set name
	set=$(weight_set)
	name=$(basename "$set")
	# A bind mount stands in for the service's CDI device (rekindle.dev/weights=NAME):
	# the same host folder at the same place in the container, before and after.
	ENGINE_FLAGS=(--volume="$set:/rekindle/weights/$name:ro" --env="ENGINE_WEIGHT_SET=/rekindle/weights/$name")
	roundtrip 0 0 -set
	local s0=$BATS_TEST_TMPDIR/state0.json s1=$BATS_TEST_TMPDIR/state1.json
	is "$(jq -r .cold_start.weights_source "$s0")" "weight-set" "cold start loads from the set (weight_set: $(jq -c .weight_set "$s0"))"
	is "$(jq -r .weight_set.registered "$s0")" "true" "the set is registered"
	is "$(jq -r .last_resume.weights_source "$s1")" "weight-set" "the resume after the restore copies from the set"
	is "$(jq -r .weight_set.register_s "$s1")" "$(jq -r .weight_set.register_s "$s0")" "registered once, before the checkpoint"
	say "weight set $name: registered in $(jq -r .weight_set.register_s "$s0")s (read-only: $(jq -r .weight_set.read_only_registration "$s0")); reload after the restore $(jq -r '.last_resume | "\(.weights_copy_gbps) GB/s copy, \(.weights_reload_gbps) GB/s with checksum (\(.weights_reload_s)s)"' "$s1")"
	# The mapping is of a file on a bind mount: CRIU leaves its bytes out
	# (an 8 GB engine's image is about 1.7 GB without any set).
	local size setbytes
	size=$(jq -r .size "$CK_JSON")
	setbytes=$(jq -r .bytes "$set/rekindle-set.json")
	[ "$size" -lt "$setbytes" ] || die "checkpoint image is $size bytes, the set $setbytes: the set's bytes went into it"
}

# bats test_tags=gpu
@test "hf-engine: transformers, torch.compile and CUDA graphs; checkpoint, restore, same tokens, nothing compiled again" {
	skip_if_no_gpu
	skip_if_no_gpu_stack
	gpu_setup
	run_nerdctl image inspect "$HF_IMAGE"
	export CK_JSON=$BATS_TEST_TMPDIR/ck.json
	IMAGE_UNDER_TEST=$HF_IMAGE GPU_GB=${REKINDLE_HF_ENGINE_GB:-1}
	[ -z "${REKINDLE_HF_BATCH_SIZES:-}" ] || ENGINE_FLAGS=(--env="ENGINE_BATCH_SIZES=$REKINDLE_HF_BATCH_SIZES")
	COMPLETIONS='{"prompt": ["Rekindle restores", "warm GPU engines in seconds, compiled once"], "max_tokens": 24}'
	roundtrip 0 0 -hf
	local s0=$BATS_TEST_TMPDIR/state0.json s1=$BATS_TEST_TMPDIR/state1.json
	is "$(jq -r .engine.backend "$s0")" "transformers" "the engine runs transformers' model code"
	say "hf-engine: transformers $(jq -r .engine.transformers "$s0"), torch $(jq -r .engine.torch "$s0"), compile $(jq -r .engine.compile_mode "$s0"), graphs for batch sizes $(jq -c .engine.graphs "$s0")"
	say "hf-engine compile at ready: $(jq -c .engine.compile_at_ready "$s0")"
	[ "$(jq -r .engine.compile_at_ready.frames_compiled "$s0")" -gt 0 ] || die "nothing was compiled at the cold start"
	is "$(jq -c .engine.compile_now "$s1")" "$(jq -c .engine.compile_at_ready "$s0")" \
		"torch.compile's counters after the restore and two generations (nothing compiled again)"
	is "$(jq -c .engine.graphs "$s1")" "$(jq -c .engine.graphs "$s0")" "the captured CUDA graphs survive the restore"
}

# ---- the host filled: one replica per GPU from one checkpoint image -----------

# The replicas listen on the port they were checkpointed with, each in a
# network namespace of its own with only loopback (--network none, as in
# 510-vllm.bats): the test talks to each one inside its namespace.
REPLICA_PORT=30000

# ns_http PID METHOD PATH [JSON]: one HTTP call to the engine that listens in
# the network namespace of PID.
ns_http() {
	local pid=$1 method=$2 path=$3 body=${4:-}
	local args=(-fsS --max-time "${NS_HTTP_TIMEOUT:-60}" -X "$method")
	[ -z "$body" ] || args+=(-H 'Content-Type: application/json' -d "$body")
	nsenter -t "$pid" -n curl "${args[@]}" "http://127.0.0.1:$REPLICA_PORT$path"
}

ctr_pid() {
	"$REKINDLE_ROOT/scripts/nerdctl.sh" "$RK_DIR" inspect -f '{{.State.Pid}}' "$1"
}

# fresh_image ARCHIVE IMAGE: IMAGE as its first restore finds it: removed
# with its cache entries (oci-checkpoint rm returns once containerd's
# collector has freed them), imported again from ARCHIVE without being
# unpacked (nerdctl run unpacks it, as it does an image just made or
# pulled), and the page cache dropped, so the checkpoint comes from disk.
fresh_image() {
	local archive=$1 image=$2
	if "$REKINDLE_ROOT/scripts/nerdctl.sh" "$RK_DIR" image inspect "$image" >/dev/null 2>&1; then
		ocicp --address "$RK_DIR/containerd.sock" --namespace default rm "$image"
	fi
	run_ctr images import --no-unpack "$archive"
	sync
	echo 3 >/proc/sys/vm/drop_caches || die "cannot drop the page cache"
}

# replica NAME GPU IMAGE: one replica, run as a background job by
# replicas_at_once: nerdctl run -d IMAGE on GPU, then GET /health from inside
# its namespace every 50 ms until it answers 200 (the engine has resumed),
# then the prompt, once. Writes $BATS_TEST_TMPDIR/NAME.json: the container's
# ID, when `nerdctl run` returned, when the engine was healthy and when it
# answered (epoch seconds), and its tokens; {"error": ...} when a step failed.
replica() {
	local name=$1 gpu=$2 image=$3 out=$BATS_TEST_TMPDIR/$1.json
	local id pid t_run t_health answer deadline=$((SECONDS + 600))
	if ! ENGINE_NETWORK=none run_gpu_engine "$name" "$gpu" "$REPLICA_PORT" "$image" 2>"$BATS_TEST_TMPDIR/$name.run"; then
		replica_failed "$out" "nerdctl run failed: $(sed -n 's/^  //p' "$BATS_TEST_TMPDIR/$name.run" | tail -2)"
		return 1
	fi
	t_run=$EPOCHREALTIME
	id=$(tail -1 <<<"$output")
	pid=$(ctr_pid "$name") || { replica_failed "$out" "no pid"; return 1; }
	until NS_HTTP_TIMEOUT=2 ns_http "$pid" GET /health >/dev/null 2>&1; do
		[ "$SECONDS" -lt "$deadline" ] ||
			{ replica_failed "$out" "not healthy within ${REKINDLE_GPU_REPLICA_DEADLINE:-300} s"; return 1; }
		# A wake that failed, or a container that died, never turns healthy:
		# look every second rather than wait out the deadline.
		if [ $((++polls % 20)) -eq 0 ]; then
			[ "$("$REKINDLE_ROOT/scripts/nerdctl.sh" "$RK_DIR" inspect -f '{{.State.Running}}' "$name" 2>/dev/null)" = true ] ||
				{ replica_failed "$out" "the container stopped before it was healthy"; return 1; }
			st=$("$REKINDLE_ROOT/scripts/nerdctl.sh" "$RK_DIR" exec "$name" cat /.rekindle/status 2>/dev/null) || st=
			[ -z "$st" ] || [ "$(jq -r .outcome <<<"$st")" = resumed ] ||
				{ replica_failed "$out" "the wake failed: $(jq -r .error <<<"$st")"; return 1; }
		fi
		sleep 0.05
	done
	t_health=$EPOCHREALTIME
	answer=$(ns_http "$pid" POST /generate "$PROMPT") || { replica_failed "$out" "no answer to the prompt"; return 1; }
	jq -cn --arg id "$id" --argjson gpu "$gpu" --argjson t_run "$t_run" --argjson t_health "$t_health" \
		--argjson t_answer "$EPOCHREALTIME" --argjson answer "$answer" \
		'{id: $id, gpu: $gpu, t_run: $t_run, t_health: $t_health, t_answer: $t_answer, output_ids: $answer.output_ids}' >"$out"
}

replica_failed() {
	jq -cn --arg e "$2" '{error: $e}' >"$1"
}

# first_then_cached ARCHIVE IMAGE GPU...: a replica on each GPU, at once,
# with IMAGE fresh from ARCHIVE (first: its cache entry built then), then
# again (cached); each batch checked and removed. FIRST_S and CACHED_S: the
# time to the last answer of each.
first_then_cached() {
	local archive=$1 image=$2
	shift 2
	fresh_image "$archive" "$image"
	replicas_at_once first "$image" "$@"
	FIRST_S=$ALL_S
	is "$(jq -r .cache "$BATS_TEST_TMPDIR/${REPLICAS[0]}.json")" "miss" "$# at once, first: the checkpoint cache entry is built"
	check_replicas
	remove_replicas
	replicas_at_once cached "$image" "$@"
	CACHED_S=$ALL_S
	check_replicas
	remove_replicas
}

# replicas_at_once WHAT IMAGE GPU...: one replica of IMAGE on each GPU, all
# their `nerdctl run`s started at once; waits until every one has answered
# and says the time from the start to the last answer (also left in ALL_S)
# and each replica's own, with containerd's restore phases and the wake
# helper's resume. The containers (gpu-rep-WHAT-COUNT-gGPU) are left in
# REPLICAS, each one's record in $BATS_TEST_TMPDIR/NAME.json.
replicas_at_once() {
	local what=$1 image=$2 g t0 mark name i jobs=() failed='' parts=() f r st files
	shift 2
	REPLICAS=()
	mark=$(($(wc -l <"$RK_DIR/containerd.log") + 1))
	t0=$EPOCHREALTIME
	for g in "$@"; do
		name=gpu-rep-$what-$#-g$g
		REPLICAS+=("$name")
		replica "$name" "$g" "$image" 3>&- &
		jobs+=($!)
	done
	for i in "${!jobs[@]}"; do
		wait "${jobs[$i]}" || failed+=" ${REPLICAS[$i]}: $(jq -r .error "$BATS_TEST_TMPDIR/${REPLICAS[$i]}.json" 2>/dev/null);"
	done
	[ -z "$failed" ] || die "replicas that did not answer:$failed"
	for name in "${REPLICAS[@]}"; do
		f=$BATS_TEST_TMPDIR/$name.json
		r=$(python3 "$REKINDLE_ROOT/bench/bench-log.py" restore "$RK_DIR/containerd.log" "$(jq -r .id "$f")" "$mark") ||
			die "cannot read containerd's log"
		st=$("$REKINDLE_ROOT/scripts/nerdctl.sh" "$RK_DIR" exec "$name" cat /.rekindle/status) || die "no /.rekindle/status in $name"
		jq -c --argjson r "$r" --argjson st "$st" '. + {containerd: $r.containerd, cache: $r.cache, status: $st}' "$f" >"$f.tmp"
		mv "$f.tmp" "$f"
		parts+=("$(jq -r --argjson t0 "$t0" 'def s: if type == "number" then . * 100 | round / 100 else "?" end;
			"GPU \(.gpu) \(.t_answer - $t0 | s)s (run \(.t_run - $t0 | s)s, setup \(.containerd."container-setup" | s)s, criu \(.containerd."criu-restore" | s)s, resume \(.status.resume_seconds | s)s)"' "$f")")
	done
	files=("${REPLICAS[@]/#/$BATS_TEST_TMPDIR/}")
	ALL_S=$(awk -v a="$t0" -v b="$(jq -s 'map(.t_answer) | max' "${files[@]/%/.json}")" 'BEGIN { printf "%.2f", b - a }')
	say "$what restore, $# at once: all answered after ${ALL_S}s; cache: $(tail -n +"$mark" "$RK_DIR/containerd.log" | grep -c 'checkpoint cache miss: building') miss line(s); $(printf '%s; ' "${parts[@]}" | sed 's/; $//')"
}

# check_replicas: each replica in REPLICAS resumed (the wake helper's
# status), answered the tokens the engine gave before its checkpoint, is
# that engine's process with its weights, and runs on the GPU it was given
# (moved there from the checkpoint's GPU 0, but for the one on GPU 0).
check_replicas() {
	local name f pid state uuids=()
	for name in "${REPLICAS[@]}"; do
		f=$BATS_TEST_TMPDIR/$name.json
		is "$(jq -r .status.outcome "$f")" "resumed" "$name: wake outcome (/.rekindle/status: $(jq -c .status "$f"))"
		is "$(jq -c .output_ids "$f")" "$(cat "$BATS_TEST_TMPDIR/before")" "$name: greedy tokens, the same as before the checkpoint"
		pid=$(ctr_pid "$name") || die "no pid for $name"
		state=$(ns_http "$pid" GET /state) || die "no /state from $name"
		is "$(jq -r .start_time <<<"$state")" "$(jq -r .start_time "$BATS_TEST_TMPDIR/state0.json")" "$name: the same engine process, restored, not restarted"
		is "$(jq -r .loaded_checksum <<<"$state")" "$(jq -r .weights_checksum "$BATS_TEST_TMPDIR/state0.json")" "$name: weights reloaded intact"
		is "$(jq -r .gpu_uuid <<<"$state")" "$(gpu_uuid "$(jq -r .gpu "$f")")" "$name: the engine runs on the GPU the container was given"
		uuids+=("$(jq -r .gpu_uuid <<<"$state")")
	done
	is "$(printf '%s\n' "${uuids[@]}" | sort -u | wc -l)" "${#REPLICAS[@]}" "each replica on a GPU of its own"
}

remove_replicas() {
	local name
	for name in "${REPLICAS[@]}"; do
		run_nerdctl rm -f "$name"
	done
}

# bats test_tags=gpu
@test "gpu-engine: N replicas restored at once from one checkpoint image, one per GPU, each remapped" {
	skip_if_fewer_gpus 2
	skip_if_no_gpu_stack
	command -v nsenter >/dev/null || skip "nsenter is not installed (util-linux): the replicas are reached inside their network namespaces"
	gpu_setup
	local ngpu n g gpus=() one
	ngpu=$(nvidia-smi -L | wc -l)
	n=${REKINDLE_GPU_REPLICAS:-$((ngpu < 8 ? ngpu : 8))}
	if [ "$n" -lt 2 ] || [ "$n" -gt "$ngpu" ]; then die "REKINDLE_GPU_REPLICAS=$n: want 2 to $ngpu (this host's GPUs)"; fi
	# GPUs 1 .. N-1, moved there from GPU 0, and GPU 0 itself; one replica
	# alone goes to the last GPU, moved there as most of the N are.
	for ((g = 1; g < n; g++)); do gpus+=("$g"); done
	gpus+=(0)
	one=$((n - 1))

	# The engine on GPU 0, checkpointed into an archive: each first restore
	# below is of the image imported from it anew.
	local src=gpu-rep-src image=rekindle.local/ckpt:gpu-replicas archive=$BATS_TEST_TMPDIR/ckpt.tar pid t
	ENGINE_NETWORK=none run_gpu_engine "$src" 0 "$REPLICA_PORT" "$GPU_IMAGE"
	pid=$(ctr_pid "$src")
	wait_for "the GPU engine in $src to be healthy" "${REKINDLE_GPU_COLD_TIMEOUT:-900}" ns_http "$pid" GET /health
	ns_http "$pid" GET /state >"$BATS_TEST_TMPDIR/state0.json" || die "no /state from $src"
	is "$(jq -r .gpu_uuid "$BATS_TEST_TMPDIR/state0.json")" "$(gpu_uuid 0)" "the engine runs on GPU 0"
	ns_http "$pid" POST /generate "$PROMPT" | jq -c .output_ids >"$BATS_TEST_TMPDIR/before"
	answered "before the checkpoint" "$(cat "$BATS_TEST_TMPDIR/before")"
	echo "$image" >>"$BATS_TEST_TMPDIR/images"
	t=$EPOCHREALTIME
	ocicp --address "$RK_DIR/containerd.sock" --namespace default create --engine sglang --port "$REPLICA_PORT" \
		--output "oci-archive:$archive" "$src" "$image"
	say "$(grep -m1 '^==> checkpoint:' <<<"$output") (wall $(secs_since "$t")s), archive $(($(stat -c %s "$archive") >> 20)) MiB"
	run_nerdctl rm -f "$src"

	# One replica alone, then N at once, each first (cache and page cache
	# cold) and cached.
	local one_first one_cached all_first all_cached
	first_then_cached "$archive" "$image" "$one"
	one_first=$FIRST_S one_cached=$CACHED_S
	first_then_cached "$archive" "$image" "${gpus[@]}"
	all_first=$FIRST_S all_cached=$CACHED_S
	rm -f "$archive"

	say "$n replicas at once against one, to the last first answer: first ${all_first}s vs ${one_first}s ($(awk -v a="$all_first" -v b="$one_first" 'BEGIN { printf "%.2f", a / b }')x), cached ${all_cached}s vs ${one_cached}s ($(awk -v a="$all_cached" -v b="$one_cached" 'BEGIN { printf "%.2f", a / b }')x); target <= 1.5x (timed by bench/gpu-bench.sh with GPU_BENCH_REPLICAS=$n)"
}
