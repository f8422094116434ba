#!/usr/bin/env bats
# GPU: a real SGLang server (integrations/sglang/serve.py in the sglang-engine
# image, the host's Python and torch and an SGLang site folder bound in)
# checkpointed with `oci-checkpoint create --engine sglang` and restored with
# a plain `nerdctl run`: the first restore from a dropped page cache, a
# cached one beside it, one onto another GPU where the host has two. Each
# must give the same greedy tokens for one prompt and for four prompts sent
# one by one, keep the container's processes and /dev/shm, and load, capture
# and compile nothing again: the wake resumes SGLang's memory and reloads the
# weights from the model folder (update_weights_from_disk).
#
# Runs on a GPU host (tests/gpu/run.sh); everywhere else every test skips and
# says why. The containers have their own network namespace with only
# loopback (--network none); the tests reach them inside it.
#
#   REKINDLE_SGLANG_SITE   host folder holding SGLang (integrations/sglang/wheels.sh;
#                          default /var/tmp/sglang-site)
#   REKINDLE_SGLANG_MODEL  model folder (default /var/tmp/rekindle-vllm-model, which
#                          510-vllm.bats shares; made by tests/gpu/make-model.py when absent)
#   REKINDLE_SGLANG_ARGS   more launch_server flags (default: --context-length 2048
#                          --mem-fraction-static 0.4 --cuda-graph-max-bs 8)
#   REKINDLE_SGLANG_CHECKPOINT_FLAGS  more oci-checkpoint create flags for the checkpoints (e.g. --compression pages)
#   REKINDLE_SGLANG_BIG_SHAPE  the real-size model's shape (make-model.py --shape; default qwen3-8b, 16.4 GB)
#   REKINDLE_SGLANG_BIG_MODEL  its folder (default /var/tmp/rekindle-vllm-SHAPE, which 510 shares; made when absent)
#   REKINDLE_PYTHON        host interpreter with torch (default python3)
#   REKINDLE_SGLANG_MULTI_GPU  1: the tensor parallel test also checkpoints and restores (oci-checkpoint
#                          refuses SGLang on several GPUs otherwise; docs/multi-gpu.md)

load helpers
load gpu

SGLANG_IMAGE=rekindle.local/sglang-engine:latest
SITE=${REKINDLE_SGLANG_SITE:-/var/tmp/sglang-site}
MODEL=${REKINDLE_SGLANG_MODEL:-/var/tmp/rekindle-vllm-model}
SARGS=${REKINDLE_SGLANG_ARGS:---context-length 2048 --mem-fraction-static 0.4 --cuda-graph-max-bs 8}
HOST_PY=${REKINDLE_PYTHON:-python3}
BIG_SHAPE=${REKINDLE_SGLANG_BIG_SHAPE:-qwen3-8b}
BIG_MODEL=${REKINDLE_SGLANG_BIG_MODEL:-/var/tmp/rekindle-vllm-$BIG_SHAPE}
PORT=30000
PROMPTS=("Rekindle restores warm GPU engines in seconds." "def main():" "import os, sys" "class Engine:" "    return self")

teardown_file() {
	[ ! -f "$BATS_FILE_TMPDIR/stack-up" ] || RK_DIR=$BATS_FILE_TMPDIR/rk stack_down
	[ ! -d "$BATS_FILE_TMPDIR/weights" ] || WEIGHTS_DIR=$BATS_FILE_TMPDIR/weights weights_down
}

teardown() {
	remove_listed
}

skip_if_no_sglang() {
	skip_if_no_gpu
	skip_if_no_cdi
	[ -d "$SITE/sglang" ] ||
		skip "no SGLang in $SITE: install SGLang 0.5.17 there (integrations/sglang/wheels.sh; images/README.md, SGLang engine) or set REKINDLE_SGLANG_SITE"
}

# sglang_setup: once per file: the stack, the image, the model, and the flags
# that bind the host's Python and the SGLang site into the container.
sglang_setup() {
	engine_stack_up sglang-engine
	if [ "$STACK_FRESH" = 1 ]; then
		[ -f "$MODEL/config.json" ] || run_cmd "$HOST_PY" "$REKINDLE_ROOT/tests/gpu/make-model.py" "$MODEL"
		prebuild "$MODEL"
		host_pyflags
		grep -q -- "--volume=$SITE:$SITE:" "$BATS_FILE_TMPDIR/pyflags" ||
			die "host-python.sh does not bind $SITE: $(cat "$BATS_FILE_TMPDIR/pyflags")"
		say "SGLang $(sed -n 's/^Version: //p' "$SITE"/sglang-*.dist-info/METADATA) from $SITE, model $MODEL"
	fi
	mapfile -t PYFLAGS <"$BATS_FILE_TMPDIR/pyflags"
}

# prebuild MODEL [FLAGS]: the kernels SGLang compiles at run time for MODEL
# (and launch_server FLAGS), built on the host (prebuild-kernels.sh).
prebuild() {
	PREBUILD_ARGS=${2:-} run_cmd "$REKINDLE_ROOT/integrations/sglang/prebuild-kernels.sh" "$SITE" "$1" "$HOST_PY"
	say "$(tail -1 <<<"$output")"
}

# run_sglang NAME IMAGE [FLAGS...]: nerdctl run -d on the GPUs in SGLANG_GPUS
# (default 0), own network namespace, the host's Python, the SGLang site and
# the model ($SMODEL, default $MODEL) bound in; RUN_STATUS is the exit status
# expected (default 0).
run_sglang() {
	local name=$1 image=$2
	shift 2
	echo "$name" >>"$BATS_TEST_TMPDIR/containers"
	local g devs=()
	for g in ${SGLANG_GPUS:-0}; do devs+=(--device "nvidia.com/gpu=$g"); done
	run_nerdctl "${RUN_STATUS:-0}" run -d --name "$name" "${devs[@]}" --network none --shm-size 1g \
		"${PYFLAGS[@]}" --volume="${SMODEL:-$MODEL}:/models/model:ro" --env="ENGINE_SGLANG_ARGS=$SARGS" "$@" "$image"
}

# answer NAME METHOD PATH [JSON]: the HTTP status and body of one call, on one line.
answer() {
	local name=$1 method=$2 path=$3 body=${4:-} pid
	pid=$("$REKINDLE_ROOT/scripts/nerdctl.sh" "$RK_DIR" inspect -f '{{.State.Pid}}' "$name") || return 1
	nsenter -t "$pid" -n curl -sS --max-time 120 -X "$method" -H 'Content-Type: application/json' \
		${body:+-d "$body"} -w ' %{http_code}' "http://127.0.0.1:$PORT$path"
}

# serving NAME SECS: wait until the server in container NAME answers a
# one-token request; fails at once, with its log's end, if the container
# exits first.
serving() {
	local i
	for ((i = 0; i < $2 * 2; i++)); do
		call_in "$1" POST /generate "$(body "${PROMPTS[0]}" 1)" >/dev/null 2>&1 && return 0
		[ "$("$REKINDLE_ROOT/scripts/nerdctl.sh" "$RK_DIR" inspect -f '{{.State.Running}}' "$1" 2>/dev/null)" = true ] ||
			die "$1 exited before it served: $("$REKINDLE_ROOT/scripts/nerdctl.sh" "$RK_DIR" logs "$1" 2>&1 | tail -15)"
		sleep 0.5
	done
	die "$1 did not serve within $2 s"
}

# body PROMPT [N]: a greedy /generate request of N tokens (default 32).
body() {
	jq -cn --arg t "$1" --argjson n "${2:-32}" \
		'{text: $t, sampling_params: {max_new_tokens: $n, temperature: 0, ignore_eos: true}}'
}

# flush NAME: empty the prefix cache. SGLang refuses (400) while a request
# is still running, which the last one's answer can outrun (seen): retry.
flush() {
	local i
	for ((i = 0; i < 40; i++)); do
		call_in "$1" POST /flush_cache >/dev/null 2>&1 && return 0
		sleep 0.25
	done
	call_in "$1" POST /flush_cache >/dev/null
}

# tokens NAME: the greedy output ids of each prompt, sent one at a time
# after a flush of the prefix cache: a batch's shapes differ from call to
# call, so does a prefill that starts from cached tokens, and with random
# weights' flat logits a near tie then flips (seen: a restored server's
# second pass over the prompts).
tokens() {
	local p answer ids=()
	for p in "${PROMPTS[@]}"; do
		flush "$1" || return 1
		answer=$(call_in "$1" POST /generate "$(body "$p")") || return 1
		ids+=("$(jq -ce '.output_ids' <<<"$answer")") || return 1
	done
	jq -sc . <<<"${ids[*]}"
}

# inside NAME: what the tests compare before and after: each process's pid
# and command line, and /dev/shm.
inside() {
	"$REKINDLE_ROOT/scripts/nerdctl.sh" "$RK_DIR" exec "$1" sh -c '
		for p in /proc/[0-9]*; do
			n=${p#/proc/}; [ "$n" = $$ ] && continue
			c=$(tr "\0" " " <"$p/cmdline" 2>/dev/null | cut -c1-60); [ -n "$c" ] || continue
			# The wake helper stays after the wake, idle (cmd/rekindle-wake): not part of the engine.
			case "$c" in "/.rekindle/rekindle-wake "* | "sh -c"* | "tr "* | "cut "* | "ls "* | "sort "*) continue ;; esac
			echo "pid $n $c"
		done | sort -n -k2
		echo "shm $(ls /dev/shm | sort | tr "\n" " ")"'
}

# restore NAME IMAGE [FLAGS...]: nerdctl run IMAGE, wait for the wake helper's
# outcome and the first token; prints the times.
restore() {
	local name=$1 image=$2 t pid ft st
	shift 2
	t=$EPOCHREALTIME
	run_sglang "$name" "$image" "$@"
	local run_s
	run_s=$(secs_since "$t")
	pid=$("$REKINDLE_ROOT/scripts/nerdctl.sh" "$RK_DIR" inspect -f '{{.State.Pid}}' "$name")
	ft=$(nsenter -t "$pid" -n "$HOST_PY" "$REKINDLE_ROOT/tests/gpu/first-token.py" "$PORT" "$t" \
		"$(body "${PROMPTS[0]}" 1)" "/proc/$pid/root/.rekindle/status") || die "$name: no first token after the restore"
	st=$(wake_status "$name")
	is "$(jq -r .outcome <<<"$st")" resumed "wake outcome in $name (/.rekindle/status: $st)"
	is "$(jq -r '[.calls[].call] | join(" | ")' <<<"$st")" \
		'POST /resume_memory_occupation {} | POST /update_weights_from_disk {"model_path":"/models/model"}' \
		"$name: the wake resumed SGLang's memory and reloaded the model"
	[ "$(jq -c .token_ids <<<"$ft")" != null ] || die "$name: no token after the restore: $ft"
	say "$name: nerdctl run ${run_s}s, resumed after $(jq -r .awake_s <<<"$ft")s (resume $(jq -r .resume_seconds <<<"$st")s), to first token $(jq -r .token_s <<<"$ft")s (its request $(jq -r .request_s <<<"$ft")s); $(restored_line)"
}

# same_as_before NAME: the restored server NAME answers and holds what the
# cold one did, and logged no cold-start work.
same_as_before() {
	local name=$1
	is "$(tokens "$name")" "$(cat "$BATS_FILE_TMPDIR/tokens")" "$name: greedy tokens of five prompts, one by one"
	is "$(inside "$name")" "$(cat "$BATS_FILE_TMPDIR/inside")" "$name: the same processes (pids, command lines) and /dev/shm"
	"$REKINDLE_ROOT/scripts/nerdctl.sh" "$RK_DIR" logs "$name" >"$BATS_TEST_TMPDIR/$name.log" 2>&1
	is "$("$HOST_PY" "$REKINDLE_ROOT/integrations/sglang/serve.py" phases "$BATS_TEST_TMPDIR/$name.log" | jq -r .cold_lines)" 0 \
		"$name: SGLang logged no weight load, graph capture or compilation after the restore"
}

# bats test_tags=gpu
@test "sglang: cold start, checkpoint, restore with nerdctl run (first from a dropped page cache, cached beside it, on another GPU), same tokens, nothing loaded or captured again" {
	skip_if_no_sglang
	sglang_setup
	local t
	t=$EPOCHREALTIME
	run_sglang sglang-cold "$SGLANG_IMAGE"
	serving sglang-cold 900
	local cold
	cold=$(secs_since "$t")
	tokens sglang-cold >"$BATS_FILE_TMPDIR/tokens" || die "no tokens from the cold server"
	inside sglang-cold >"$BATS_FILE_TMPDIR/inside"
	"$REKINDLE_ROOT/scripts/nerdctl.sh" "$RK_DIR" logs sglang-cold >"$BATS_TEST_TMPDIR/cold.log" 2>&1
	local ph
	ph=$("$HOST_PY" "$REKINDLE_ROOT/integrations/sglang/serve.py" phases "$BATS_TEST_TMPDIR/cold.log")
	say "cold start: nerdctl run -> first token ${cold}s; SGLang's log: $ph"
	[ "$(jq -r .cold_lines <<<"$ph")" -gt 0 ] || die "SGLang logged no weight load or graph capture at its cold start: the test could not see one after a restore"
	say "in the container: $(tr '\n' '|' <"$BATS_FILE_TMPDIR/inside")"
	# rekindle_sglang's gate: from the release until the weights are loaded
	# again, /health answers 503 and a request is refused, saying why.
	call_in sglang-cold POST /release_memory_occupation '{}' >/dev/null
	is "$(answer sglang-cold GET /health)" "~ 503$" "/health while the memory is released"
	is "$(answer sglang-cold POST /generate "$(body "${PROMPTS[0]}" 1)")" "~is released.* 503$" "a request while the memory is released"
	call_in sglang-cold POST /resume_memory_occupation '{}' >/dev/null
	is "$(answer sglang-cold POST /generate "$(body "${PROMPTS[0]}" 1)")" "~not loaded again.* 503$" "a request before the weights are loaded again"
	call_in sglang-cold POST /update_weights_from_disk '{"model_path": "/models/model"}' >/dev/null
	is "$(answer sglang-cold GET /health)" "~ 200$" "/health once the weights are back"
	is "$(tokens sglang-cold)" "$(cat "$BATS_FILE_TMPDIR/tokens")" "the same tokens after a release, resume and reload"

	local image=rekindle.local/ckpt:sglang
	echo "$image" >>"$BATS_TEST_TMPDIR/images"
	t=$EPOCHREALTIME
	ocicp --address "$RK_DIR/containerd.sock" --namespace default create --engine sglang sglang-cold "$image"
	say "$(grep -m1 '^==> checkpoint:' <<<"$output") (wall $(secs_since "$t")s)"
	ocicp --address "$RK_DIR/containerd.sock" --namespace default inspect --json "$image"
	local info=$output
	say "checkpoint image: $(($(jq -r .layer_size <<<"$info") >> 20)) MiB"
	is "$(jq -r '.annotations."org.rekindle.engine.version"' <<<"$info")" \
		"sglang $(sed -n 's/^Version: //p' "$SITE"/sglang-*.dist-info/METADATA)" "the image records SGLang's version"
	run_nerdctl rm -f sglang-cold

	# The first restore: the layer and the model out of the page cache.
	sync
	echo 3 >/proc/sys/vm/drop_caches
	restore sglang-r1 "$image"
	logged "restore"
	same_as_before sglang-r1
	# A second beside the first: the extracted checkpoint is cached.
	restore sglang-r2 "$image"
	same_as_before sglang-r2
	is "$(tokens sglang-r1)" "$(cat "$BATS_FILE_TMPDIR/tokens")" "sglang-r1 still answers the same beside sglang-r2"
	run_nerdctl rm -f sglang-r1 sglang-r2
	local n
	n=$(nvidia-smi -L | wc -l)
	if [ "$n" -ge 2 ]; then
		SGLANG_GPUS=1 restore sglang-g1 "$image"
		same_as_before sglang-g1
	else
		say "one GPU here: the restore onto another GPU was not run"
	fi
}

# bats test_tags=gpu
@test "sglang: a server without the memory saver is refused before anything changes, and keeps serving" {
	skip_if_no_sglang
	sglang_setup
	run_sglang sglang-nosaver "$SGLANG_IMAGE" --env=ENGINE_SGLANG_MEMORY_SAVER=0 \
		--env="ENGINE_SGLANG_ARGS=$SARGS --disable-cuda-graph"
	serving sglang-nosaver 900
	local before
	before=$(tokens sglang-nosaver)
	echo rekindle.local/ckpt:sglang-nosaver >>"$BATS_TEST_TMPDIR/images"
	ocicp 1 --address "$RK_DIR/containerd.sock" --namespace default create --engine sglang sglang-nosaver rekindle.local/ckpt:sglang-nosaver
	is "$output" "~started without --enable-memory-saver.*start it with --enable-memory-saver" "the error names the flag that fixes it"
	is "$output" "~nothing was changed, the engine is left running" "the error says the engine was left alone"
	run_nerdctl 1 image inspect rekindle.local/ckpt:sglang-nosaver
	is "$(tokens sglang-nosaver)" "$before" "it still serves the same tokens"
}

# bats test_tags=gpu
@test "sglang: a restore onto a host whose SGLang differs fails, naming the file that differs, and leaves nothing running" {
	skip_if_no_sglang
	sglang_setup
	run_sglang sglang-src "$SGLANG_IMAGE" --env="ENGINE_SGLANG_ARGS=$SARGS --disable-cuda-graph"
	serving sglang-src 900
	local image=rekindle.local/ckpt:sglang-other
	echo "$image" >>"$BATS_TEST_TMPDIR/images"
	ocicp --address "$RK_DIR/containerd.sock" --namespace default create --engine sglang sglang-src "$image"
	run_nerdctl rm -f sglang-src
	# Another SGLang build at the same path: the site hard-linked, one
	# extension module the scheduler maps rewritten one byte longer.
	local other=$BATS_FILE_TMPDIR/other-site so=sgl_kernel/sm90/common_ops.abi3.so
	cp -al "$SITE" "$other"
	rm "$other/$so" && cp "$SITE/$so" "$other/$so" && printf "\0" >>"$other/$so" || die "cannot make the other SGLang build"
	mapfile -t PYFLAGS < <(sed "s|^--volume=$SITE:$SITE:|--volume=$other:$SITE:|" "$BATS_FILE_TMPDIR/pyflags")
	echo sglang-other >>"$BATS_TEST_TMPDIR/containers"
	run_nerdctl '?' run -d --name sglang-other --device nvidia.com/gpu=0 --network none --shm-size 1g \
		"${PYFLAGS[@]}" --volume="$MODEL:/models/model:ro" "$image"
	say "restore with another $so: exit $status: $(tail -1 <<<"$output")"
	[ "$status" -ne 0 ] || die "the restore onto another SGLang succeeded"
	is "$output" "~CRIU: File ${SITE#/}/$so has bad size" "the error names the file that differs"
	run_nerdctl '?' inspect -f '{{.State.Running}}' sglang-other
	[ "$output" != true ] || die "a container runs after the failed restore"
	rm -rf "$other"
}

# cold_and_checkpoint NAME IMAGE [FLAGS...]: a cold start of the sglang-engine
# image, its tokens and processes kept for same_as_before, then its checkpoint
# as IMAGE and the container removed.
cold_and_checkpoint() {
	local name=$1 image=$2 t
	shift 2
	t=$EPOCHREALTIME
	run_sglang "$name" "$SGLANG_IMAGE" "$@"
	serving "$name" 900
	say "$name: cold start, nerdctl run -> first token $(secs_since "$t")s"
	tokens "$name" >"$BATS_FILE_TMPDIR/tokens" || die "no tokens from $name"
	inside "$name" >"$BATS_FILE_TMPDIR/inside"
	echo "$image" >>"$BATS_TEST_TMPDIR/images"
	t=$EPOCHREALTIME
	# shellcheck disable=SC2086 # flags, split on purpose
	ocicp --address "$RK_DIR/containerd.sock" --namespace default create --engine sglang ${REKINDLE_SGLANG_CHECKPOINT_FLAGS:-} "$name" "$image"
	say "$name: $(grep -m1 '^==> checkpoint:' <<<"$output") (wall $(secs_since "$t")s)"
	ocicp --address "$RK_DIR/containerd.sock" --namespace default inspect --json "$image"
	say "$name: checkpoint image $(($(jq -r .layer_size <<<"$output") >> 20)) MiB, $(jq -r '.annotations."org.rekindle.gpu.count"' <<<"$output") GPU(s)"
	run_nerdctl rm -f "$name"
}

# bats test_tags=gpu
@test "sglang: tensor parallel 2 is refused before anything changes, naming why (REKINDLE_SGLANG_MULTI_GPU=1: checkpoint, restore on the same GPUs and on another pair, same tokens)" {
	skip_if_no_sglang
	local n before multi=${REKINDLE_SGLANG_MULTI_GPU:-}
	n=$(nvidia-smi -L | wc -l)
	[ "$n" -ge 2 ] || skip "tensor parallel 2 needs 2 GPUs, this host has $n"
	sglang_setup
	prebuild "$MODEL" "--tp-size 2"
	# serve.py sets the NCCL settings a checkpoint needs and drops SGLang's
	# custom all-reduce (docs/multi-gpu.md); the preflight checks what
	# /server_info shows of them, and refuses several GPU workers anyway
	# unless asked: their CUDA checkpoint hung on driver 580 (2 x H200).
	SGLANG_GPUS="0 1" run_sglang sglang-tp "$SGLANG_IMAGE" --env="ENGINE_SGLANG_ARGS=$SARGS --tp-size 2" --env=NCCL_DEBUG=INFO
	serving sglang-tp 900
	before=$(tokens sglang-tp) || die "no tokens from sglang-tp"
	echo rekindle.local/ckpt:sglang-tp-refused >>"$BATS_TEST_TMPDIR/images"
	unset REKINDLE_SGLANG_MULTI_GPU
	ocicp 1 --address "$RK_DIR/containerd.sock" --namespace default create --engine sglang sglang-tp rekindle.local/ckpt:sglang-tp-refused
	is "$output" "~2 GPU workers.*cannot checkpoint yet.*--engine vllm.*REKINDLE_SGLANG_MULTI_GPU=1" "the refusal names why and what serves the model instead"
	is "$output" "~nothing was changed, the engine is left running" "the error says the engine was left alone"
	run_nerdctl 1 image inspect rekindle.local/ckpt:sglang-tp-refused
	is "$(tokens sglang-tp)" "$before" "sglang-tp still serves the same tokens"
	run_nerdctl rm -f sglang-tp
	if [ "$multi" != 1 ]; then
		say "REKINDLE_SGLANG_MULTI_GPU is not 1: tensor parallel SGLang's checkpoint and restores are not tried"
		return 0
	fi
	export REKINDLE_SGLANG_MULTI_GPU=1
	SGLANG_GPUS="0 1" cold_and_checkpoint sglang-tp rekindle.local/ckpt:sglang-tp2 \
		--env="ENGINE_SGLANG_ARGS=$SARGS --tp-size 2" --env=NCCL_DEBUG=INFO
	sync
	echo 3 >/proc/sys/vm/drop_caches
	SGLANG_GPUS="0 1" restore sglang-tp1 rekindle.local/ckpt:sglang-tp2
	same_as_before sglang-tp1
	run_nerdctl rm -f sglang-tp1
	if [ "$n" -ge 4 ]; then
		SGLANG_GPUS="2 3" restore sglang-tp23 rekindle.local/ckpt:sglang-tp2
		same_as_before sglang-tp23
	else
		SGLANG_GPUS="1 0" restore sglang-tp10 rekindle.local/ckpt:sglang-tp2
		same_as_before sglang-tp10
		say "$n GPUs here: the restore onto another pair ran on the same pair swapped"
	fi
}

# set_rate NAME: the last weight set read rekindle_sglang logged in container NAME.
set_rate() {
	"$REKINDLE_ROOT/scripts/nerdctl.sh" "$RK_DIR" logs "$1" 2>&1 | grep -o 'rekindle: weights from weight set.*' | tail -1
}

# bats test_tags=gpu
@test "sglang: a real-size model (Qwen3-8B shape), weights from a weight set: cold start, checkpoint, first and cached restore, same tokens" {
	skip_if_no_sglang
	local mib free
	mib=$(nvidia-smi --query-gpu=memory.total --format=csv,noheader,nounits | head -1)
	[ "$mib" -ge 40000 ] || skip "the $BIG_SHAPE model needs a GPU of 40 GB or more, this one has $mib MiB"
	sglang_setup
	if [ ! -f "$BIG_MODEL/config.json" ]; then
		free=$(df -BG --output=avail "$(dirname "$BIG_MODEL")" | tail -1 | tr -dc 0-9)
		[ "$free" -ge 24 ] || skip "making the $BIG_SHAPE model and its checkpoint wants 24 GB free in $(dirname "$BIG_MODEL"), $free GB are"
		run_cmd "$HOST_PY" "$REKINDLE_ROOT/tests/gpu/make-model.py" "$BIG_MODEL" --shape "$BIG_SHAPE"
	fi
	prebuild "$BIG_MODEL"
	weights_up
	run_cmd "$BIN/rekindle-weights" load --quiet --allow containerd:default big "$BIG_MODEL"
	say "weight set big: $("$BIN/rekindle-weights" status --json big | jq -c '{bytes, load_seconds: .manifest.load_seconds, gbps: .manifest.gbps}')"
	local set=(--device rekindle.dev/weights=big --env=ENGINE_WEIGHT_SET=/rekindle/weights/big)
	# SGLang's release leaves its prefill CUDA graph on the GPU, which the
	# checkpoint carries: without it an 8B-class cached restore took 2.5 s,
	# not 3.1 s (docs/benchmarks-history.md).
	[[ $SARGS == *prefill-cuda-graph* ]] || SARGS+=" --disable-prefill-cuda-graph"
	SMODEL=$BIG_MODEL cold_and_checkpoint sglang-big rekindle.local/ckpt:sglang-big "${set[@]}"
	sync
	echo 3 >/proc/sys/vm/drop_caches
	SMODEL=$BIG_MODEL restore sglang-big1 rekindle.local/ckpt:sglang-big "${set[@]}"
	say "sglang-big1: $(set_rate sglang-big1)"
	[ -n "$(set_rate sglang-big1)" ] || die "sglang-big1: the wake did not read the weight set"
	SMODEL=$BIG_MODEL same_as_before sglang-big1
	run_nerdctl rm -f sglang-big1
	SMODEL=$BIG_MODEL restore sglang-big2 rekindle.local/ckpt:sglang-big "${set[@]}"
	say "sglang-big2: $(set_rate sglang-big2)"
	SMODEL=$BIG_MODEL same_as_before sglang-big2
}
