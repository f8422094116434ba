#!/usr/bin/env bats
# GPU: a real vLLM server (integrations/vllm/serve.py in the vllm-engine image,
# the host's Python, torch and vLLM bound in) checkpointed with
# `oci-checkpoint create --engine vllm` and restored with a plain
# `nerdctl run`: first restore, a cached one beside it (sleep level 2, the
# default), and a checkpoint of a restored server (level 1); the real-size
# and tensor-parallel tests also checkpoint a restored server with its pages
# images compressed (--compression pages) and time its first restore. Each
# restore must give the same greedy tokens (one prompt and a batch), keep the
# container's PIDs, its multiprocessing resource tracker, ZMQ sockets and
# /dev/shm, and compile nothing again.
#
# Runs on a GPU host (tests/gpu/run.sh); everywhere else every test skips and
# says why. The containers have their own network namespace with only
# loopback (--network none), so two restores listen on the same port side by
# side; the tests reach them inside that namespace.
#
#   REKINDLE_VLLM_SITE   host folder holding vLLM (pip install --target; default /var/tmp/vllm-site)
#   REKINDLE_VLLM_MODEL  model folder (default /var/tmp/rekindle-vllm-model; made by
#                        tests/gpu/make-model.py when absent: Qwen2, 1.15 B parameters, random weights)
#   REKINDLE_VLLM_ARGS   more vllm serve flags (default: --max-model-len 2048 --gpu-memory-utilization 0.4)
#   REKINDLE_VLLM_BIG_SHAPE  the real-size model's shape (make-model.py --shape; default qwen3-8b, 16.4 GB)
#   REKINDLE_VLLM_FRESH_NODE 0 leaves out the real-size test's fresh node (pull and restore on a second
#                            root), which wants room for two more copies of the checkpoint image
#   REKINDLE_VLLM_BIG_MODEL  its folder (default /var/tmp/rekindle-vllm-SHAPE; made when absent)
#   REKINDLE_VLLM_BIG_ARGS   its vllm serve flags (default: --max-model-len 2048 --gpu-memory-utilization 0.5)
#   REKINDLE_VLLM_70B_MODEL  the 70B-class test's model folder (default /var/tmp/rekindle-vllm-llama-70b;
#                            made when absent: make-model.py --shape llama-70b, 141 GB, some minutes)
#   REKINDLE_PYTHON      host interpreter with torch (default python3)

load helpers
load gpu

VLLM_IMAGE=rekindle.local/vllm-engine:latest
SITE=${REKINDLE_VLLM_SITE:-/var/tmp/vllm-site}
MODEL=${REKINDLE_VLLM_MODEL:-/var/tmp/rekindle-vllm-model}
VARGS=${REKINDLE_VLLM_ARGS:---max-model-len 2048 --gpu-memory-utilization 0.4}
HOST_PY=${REKINDLE_PYTHON:-python3}
BIG_SHAPE=${REKINDLE_VLLM_BIG_SHAPE:-qwen3-8b}
BIG_MODEL=${REKINDLE_VLLM_BIG_MODEL:-/var/tmp/rekindle-vllm-$BIG_SHAPE}
FRESH_NODE=${REKINDLE_VLLM_FRESH_NODE:-1}
BIG_ARGS=${REKINDLE_VLLM_BIG_ARGS:---max-model-len 2048 --gpu-memory-utilization 0.5}
BIG70_MODEL=${REKINDLE_VLLM_70B_MODEL:-/var/tmp/rekindle-vllm-llama-70b}
BIG70_GB=142 # its weights, rounded up
PORT=8000
ONE='{"model": "/models/model", "prompt": "Rekindle restores warm GPU engines in seconds.", "max_tokens": 32, "temperature": 0, "ignore_eos": true, "return_token_ids": true}'
BATCH='{"model": "/models/model", "prompt": ["def main():", "import os, sys", "class Engine:", "    return self"], "max_tokens": 24, "temperature": 0, "ignore_eos": true, "return_token_ids": true}'

teardown_file() {
	[ ! -f "$BATS_FILE_TMPDIR/stack-up" ] || RK_DIR=$BATS_FILE_TMPDIR/rk stack_down
	[ ! -d "$BATS_FILE_TMPDIR/fresh" ] || RK_DIR=$BATS_FILE_TMPDIR/fresh stack_down
	registry_stop "$BATS_FILE_TMPDIR/registry"
	[ ! -d "$BATS_FILE_TMPDIR/weights" ] || WEIGHTS_DIR=$BATS_FILE_TMPDIR/weights weights_down
}

teardown() {
	remove_listed "$BATS_FILE_TMPDIR/rk" "$BATS_FILE_TMPDIR/fresh"
}

skip_if_no_vllm() {
	skip_if_no_gpu
	skip_if_no_cdi
	PYTHONPATH=$SITE "$HOST_PY" -c 'import vllm' 2>/dev/null ||
		skip "no vLLM importable from $SITE with $HOST_PY: install vLLM 0.24.0 there (pip install --target $SITE vllm==0.24.0; images/README.md, vLLM engine) or set REKINDLE_VLLM_SITE"
}

# vllm_setup: once per file: the stack, the image, the model, and the flags
# that bind the host's Python and vLLM into the container.
vllm_setup() {
	engine_stack_up vllm-engine
	if [ "$STACK_FRESH" = 1 ]; then
		[ -f "$MODEL/config.json" ] || run_cmd "$HOST_PY" "$REKINDLE_ROOT/tests/gpu/make-model.py" "$MODEL"
		host_pyflags
		say "vLLM $(PYTHONPATH=$SITE "$HOST_PY" -c 'import vllm; print(vllm.__version__)') from $SITE, model $MODEL"
	fi
	mapfile -t PYFLAGS <"$BATS_FILE_TMPDIR/pyflags"
}

# run_vllm NAME IMAGE [FLAGS...]: nerdctl run -d on the GPUs in VLLM_GPUS
# (default 0), own network namespace, the host's Python and vLLM and the
# model ($VMODEL, default $MODEL) bound in; RUN_STATUS is the exit status
# expected (default 0).
run_vllm() {
	local name=$1 image=$2
	shift 2
	echo "$name" >>"$BATS_TEST_TMPDIR/containers"
	local g devs=()
	for g in ${VLLM_GPUS:-0}; do devs+=(--device "nvidia.com/gpu=$g"); done
	run_nerdctl "${RUN_STATUS:-0}" run -d --name "$name" "${devs[@]}" --network none --shm-size 1g \
		"${PYFLAGS[@]}" --volume="${VMODEL:-$MODEL}:/models/model:ro" --env="ENGINE_VLLM_ARGS=$VARGS" "$@" "$image"
}

# tokens NAME: the greedy token ids of the one prompt and of the batch;
# with ONE_BY_ONE set, of the batch's prompts sent one at a time instead:
# vLLM's kernels are not batch-invariant, and a batch whose requests reach
# the engine a step apart runs other shapes (with random weights' flat
# logits, a near tie then flips: seen on an 8B model, never on the 1B).
tokens() {
	jq -c '[.choices[] | .token_ids]' <<<"$(call_in "$1" POST /v1/completions "$ONE")" || return 1
	if [ -z "${ONE_BY_ONE:-}" ]; then
		jq -c '[.choices | sort_by(.index)[] | .token_ids]' <<<"$(call_in "$1" POST /v1/completions "$BATCH")"
		return
	fi
	local body answer ids=()
	while read -r body; do
		answer=$(call_in "$1" POST /v1/completions "$body") || return 1
		ids+=("$(jq -ce '.choices[0].token_ids' <<<"$answer")") || return 1
	done < <(jq -c '.prompt[] as $p | .prompt = $p' <<<"$BATCH")
	jq -sc . <<<"${ids[*]}"
}

# inside NAME: what the tests compare before and after: each process's pid
# and name, the sockets each holds, /dev/shm and the compile caches' file
# counts.
inside() {
	"$REKINDLE_ROOT/scripts/nerdctl.sh" "$RK_DIR" exec "$1" sh -c '
		for p in /proc/[0-9]*; do
			n=${p#/proc/}; [ "$n" = $$ ] && continue
			c=$(tr "\0" " " <"$p/cmdline" 2>/dev/null | cut -c1-60); [ -n "$c" ] || continue
			# The wake helper stays after the wake, idle (cmd/rekindle-wake): not part of the engine.
			case "$c" in "/.rekindle/rekindle-wake "* | "sh -c"* | "tr "* | "cut "* | "ls "* | "grep "* | "sort "* | "find "* | "wc "*) continue ;; esac
			s=$(ls -l "$p/fd" 2>/dev/null | grep -c "socket:")
			echo "pid $n sockets $s $c"
		done | sort -n -k2
		echo "shm $(ls /dev/shm | sort | tr "\n" " ")"
		echo "inductor files $(find /var/cache/engine -type f 2>/dev/null | wc -l)"'
}

# restore NAME IMAGE [FLAGS...]: nerdctl run IMAGE, wait for an awake
# server's first token and the wake helper's record; prints the times.
restore() {
	local name=$1 image=$2 t st
	shift 2
	t=$EPOCHREALTIME
	run_vllm "$name" "$image" "$@"
	local run_s pid ft first
	run_s=$(secs_since "$t")
	# The first token as a client sees it: /is_sleeping every 10 ms from
	# inside the container's network, then a request for one token (ONE's
	# prompt; greedy, so the 32-token answer after it is the same).
	pid=$("$REKINDLE_ROOT/scripts/nerdctl.sh" "$RK_DIR" inspect -f '{{.State.Pid}}' "$name")
	ft=$(nsenter -t "$pid" -n "$HOST_PY" "$REKINDLE_ROOT/tests/gpu/first-token.py" "$PORT" "$t" \
		"$(jq -c '.max_tokens = 1' <<<"$ONE")") || die "$name: no first token after the restore"
	[ "$(jq -c .token_ids <<<"$ft")" != null ] || die "$name: no token after the restore: $ft"
	st=$(wake_status "$name")
	is "$(jq -r .outcome <<<"$st")" resumed "wake outcome in $name (/.rekindle/status: $st)"
	first=$(call_in "$name" POST /v1/completions "$ONE" | jq -c '.choices[0].token_ids')
	say "$name: nerdctl run ${run_s}s, awake after $(jq -r .awake_s <<<"$ft")s (resume $(jq -r .resume_seconds <<<"$st")s), to first token $(jq -r .token_s <<<"$ft")s (its request $(jq -r .request_s <<<"$ft")s), to its 32-token answer $(secs_since "$t")s"
	[ -n "$first" ] && [ "$first" != null ] || die "$name: no tokens after the restore"
}

# pages_decoded: the shim's line on the last compressed pages it decoded.
pages_decoded() {
	grep -o 'decoded [0-9]* compressed pages images[^"]*' "$RK_DIR/containerd.log" | tail -1
}

# cuda_hold off|on: stop or start the harness's `cuda-checkpoint --hold`
# (tests/gpu/run.sh; rekindle-cuda-hold.service on a provisioned host).
cuda_hold() {
	local f=$REKINDLE_CUDA_HOLD_PIDFILE pid
	case $1 in
	off)
		pid=$(cat "$f")
		kill "$pid"
		wait_for "cuda-checkpoint --hold (pid $pid) to exit" 10 gone "$pid"
		rm -f "$f"
		;;
	on)
		setsid "$BIN/cuda-checkpoint" --hold </dev/null >/dev/null 2>&1 3>&- &
		echo $! >"$f"
		;;
	esac
}

# same_as_before NAME: the restored server NAME answers and holds what the
# cold one did.
same_as_before() {
	local name=$1
	is "$(tokens "$name")" "$(cat "$BATS_FILE_TMPDIR/tokens")" "$name: greedy tokens, one prompt and a batch of four"
	inside "$name" >"$BATS_TEST_TMPDIR/$name.inside"
	is "$(grep -v '^inductor' "$BATS_TEST_TMPDIR/$name.inside" | sed 's/ sockets [0-9]*//')" \
		"$(grep -v '^inductor' "$BATS_FILE_TMPDIR/inside" | sed 's/ sockets [0-9]*//')" \
		"$name: the same processes (pids, resource tracker) and /dev/shm"
	# Each process holds its sockets again (the API server may hold one
	# more: a connection it has not closed yet).
	local pid n before
	while read -r _ pid _ n _; do
		before=$(awk -v p="$pid" '$1 == "pid" && $2 == p { print $4 }' "$BATS_FILE_TMPDIR/inside")
		[ "$n" -ge "${before:-0}" ] || die "$name: pid $pid holds $n sockets, $before before the checkpoint"
	done < <(grep '^pid' "$BATS_TEST_TMPDIR/$name.inside")
	is "$(grep '^inductor' "$BATS_TEST_TMPDIR/$name.inside")" "$(grep '^inductor' "$BATS_FILE_TMPDIR/inside")" \
		"$name: compile caches unchanged after two completions"
	"$REKINDLE_ROOT/scripts/nerdctl.sh" "$RK_DIR" logs "$name" >"$BATS_TEST_TMPDIR/$name.log" 2>&1
	is "$("$HOST_PY" "$REKINDLE_ROOT/integrations/vllm/serve.py" phases "$BATS_TEST_TMPDIR/$name.log" | jq -r .compile_lines)" 0 \
		"$name: vLLM logged no compilation after the restore"
}

# bats test_tags=gpu
@test "vllm: cold start, checkpoint, restore with nerdctl run (first, cached beside it, and of a restored server), same tokens, nothing compiled again" {
	skip_if_no_vllm
	vllm_setup
	local t
	t=$EPOCHREALTIME
	run_vllm vllm-cold "$VLLM_IMAGE"
	wait_for "vLLM to serve" 900 call_in vllm-cold GET /health
	local cold
	cold=$(secs_since "$t")
	tokens vllm-cold >"$BATS_FILE_TMPDIR/tokens" || die "no completions from the cold server"
	inside vllm-cold >"$BATS_FILE_TMPDIR/inside"
	"$REKINDLE_ROOT/scripts/nerdctl.sh" "$RK_DIR" logs vllm-cold >"$BATS_TEST_TMPDIR/cold.log" 2>&1
	local ph
	ph=$("$HOST_PY" "$REKINDLE_ROOT/integrations/vllm/serve.py" phases "$BATS_TEST_TMPDIR/cold.log")
	say "cold start: nerdctl run -> serving ${cold}s; vLLM's log: $ph"
	[ "$(jq -r .compile_lines <<<"$ph")" -gt 0 ] || die "vLLM logged no compilation at its cold start: the test could not see one after a restore"
	grep -q "multiprocessing.resource" "$BATS_FILE_TMPDIR/inside" || die "no multiprocessing resource tracker in the cold container: $(cat "$BATS_FILE_TMPDIR/inside")"
	say "in the container: $(tr '\n' '|' <"$BATS_FILE_TMPDIR/inside")"

	local image=rekindle.local/ckpt:vllm
	echo "$image" >>"$BATS_TEST_TMPDIR/images"
	t=$EPOCHREALTIME
	ocicp --address "$RK_DIR/containerd.sock" --namespace default create --engine vllm vllm-cold "$image"
	say "$(grep -m1 '^==> checkpoint:' <<<"$output") (wall $(secs_since "$t")s)"
	ocicp --address "$RK_DIR/containerd.sock" --namespace default inspect --json "$image"
	local info=$output
	say "checkpoint image: $(($(jq -r .layer_size <<<"$info") >> 20)) MiB"
	is "$(jq -r '.annotations."org.rekindle.engine.version"' <<<"$info")" \
		"vllm $(PYTHONPATH=$SITE "$HOST_PY" -c 'import vllm; print(vllm.__version__)')" "the image records vLLM's version"
	run_nerdctl rm -f vllm-cold

	restore vllm-r1 "$image"
	logged "restore"
	same_as_before vllm-r1
	# A second restore beside the first: the extracted checkpoint is cached,
	# and both listen on port 8000, each in its own namespace.
	restore vllm-r2 "$image"
	same_as_before vllm-r2
	is "$(tokens vllm-r1)" "$(cat "$BATS_FILE_TMPDIR/tokens")" "vllm-r1 still answers the same beside vllm-r2"
	run_nerdctl rm -f vllm-r2

	# A restored server checkpointed again, at the other sleep level (weights
	# offloaded to host memory, in the checkpoint), and restored from that.
	local image2=rekindle.local/ckpt:vllm-again
	echo "$image2" >>"$BATS_TEST_TMPDIR/images"
	ocicp --address "$RK_DIR/containerd.sock" --namespace default create --engine vllm --sleep-level 1 vllm-r1 "$image2"
	say "checkpoint of the restored server: $(grep -m1 '^==> checkpoint:' <<<"$output")"
	run_nerdctl rm -f vllm-r1
	restore vllm-r3 "$image2"
	same_as_before vllm-r3
}

# bats test_tags=gpu
@test "vllm: a server without sleep mode is refused before anything changes, and keeps serving" {
	skip_if_no_vllm
	vllm_setup
	# Eager mode: this server only needs to answer, not to be fast.
	run_vllm vllm-nosleep "$VLLM_IMAGE" --env=ENGINE_VLLM_SLEEP_MODE=0 --env="ENGINE_VLLM_ARGS=$VARGS --enforce-eager"
	wait_for "vLLM without sleep mode to serve" 900 call_in vllm-nosleep GET /health
	local before
	before=$(call_in vllm-nosleep POST /v1/completions "$ONE" | jq -c '.choices[0].token_ids')
	echo rekindle.local/ckpt:vllm-nosleep >>"$BATS_TEST_TMPDIR/images"
	ocicp 1 --address "$RK_DIR/containerd.sock" --namespace default create --engine vllm vllm-nosleep rekindle.local/ckpt:vllm-nosleep
	is "$output" "~started without sleep mode.*--enable-sleep-mode" "the error names the flag that fixes it"
	is "$output" "~nothing was changed, the engine is left running" "the error says the engine was left alone"
	run_nerdctl 1 image inspect rekindle.local/ckpt:vllm-nosleep
	is "$(call_in vllm-nosleep GET /is_sleeping | jq -r .is_sleeping)" false "the server was not put to sleep"
	is "$(call_in vllm-nosleep POST /v1/completions "$ONE" | jq -c '.choices[0].token_ids')" "$before" "it still serves the same tokens"
}

# bats test_tags=gpu
@test "vllm: a restore onto a host whose vLLM differs fails, naming the file that differs, and leaves nothing running" {
	skip_if_no_vllm
	vllm_setup
	run_vllm vllm-src "$VLLM_IMAGE" --env="ENGINE_VLLM_ARGS=$VARGS --enforce-eager"
	wait_for "vLLM to serve" 900 call_in vllm-src GET /health
	local image=rekindle.local/ckpt:vllm-other
	echo "$image" >>"$BATS_TEST_TMPDIR/images"
	ocicp --address "$RK_DIR/containerd.sock" --namespace default create --engine vllm vllm-src "$image"
	run_nerdctl rm -f vllm-src
	# Another vLLM build at the same path: the site hard-linked, its
	# extension module rewritten one byte longer.
	local other=$BATS_FILE_TMPDIR/other-site so=vllm/_C_stable_libtorch.abi3.so
	cp -al "$SITE" "$other"
	rm "$other/$so" && cp "$SITE/$so" "$other/$so" && printf "\0" >>"$other/$so" || die "cannot make the other vLLM build"
	mapfile -t PYFLAGS < <(sed "s|^--volume=$SITE:$SITE:|--volume=$other:$SITE:|" "$BATS_FILE_TMPDIR/pyflags")
	grep -q -- "--volume=$other:" <<<"${PYFLAGS[*]}" || die "the vLLM site is not bound on its own: ${PYFLAGS[*]}"
	echo vllm-other >>"$BATS_TEST_TMPDIR/containers"
	run_nerdctl '?' run -d --name vllm-other --device nvidia.com/gpu=0 --network none --shm-size 1g \
		"${PYFLAGS[@]}" --volume="$MODEL:/models/model:ro" "$image"
	say "restore with another $so: exit $status: $(tail -1 <<<"$output")"
	[ "$status" -ne 0 ] || die "the restore onto another vLLM succeeded"
	is "$output" "~CRIU: File var/tmp/vllm-site/$so has bad size" "the error names the file that differs (containerd-patches/runc-shim-name-CRIU-s-errors-when-a-restore-fails)"
	run_nerdctl '?' inspect -f '{{.State.Running}}' vllm-other
	[ "$output" != true ] || die "a container runs after the failed restore"
	rm -rf "$other"
}

# bats test_tags=gpu
@test "vllm: tensor parallel 2 in one container: checkpoint, restore on the same GPUs and on another pair, checkpoint the restored server again (pages compressed), same tokens; one GPU is refused" {
	skip_if_no_vllm
	local n
	n=$(nvidia-smi -L | wc -l)
	[ "$n" -ge 2 ] || skip "tensor parallel 2 needs 2 GPUs, this host has $n"
	vllm_setup
	local t image=rekindle.local/ckpt:vllm-tp2
	echo "$image" >>"$BATS_TEST_TMPDIR/images"
	# serve.py sets the NCCL settings a checkpoint needs (docs/multi-gpu.md).
	VLLM_GPUS="0 1"
	t=$EPOCHREALTIME
	run_vllm vllm-tp "$VLLM_IMAGE" --env="ENGINE_VLLM_ARGS=$VARGS --tensor-parallel-size 2" --env=NCCL_DEBUG=INFO
	wait_for "vLLM with tensor parallel 2 to serve" 900 call_in vllm-tp GET /health
	say "tp2 cold start: nerdctl run -> serving $(secs_since "$t")s"
	# P2P is off; NCCL's shared-memory transport, left on, carries the
	# all-reduces, so the restores below must keep its /dev/shm buffers shared.
	"$REKINDLE_ROOT/scripts/nerdctl.sh" "$RK_DIR" logs vllm-tp >"$BATS_TEST_TMPDIR/tp-cold.log" 2>&1
	grep -q ' via SHM/' "$BATS_TEST_TMPDIR/tp-cold.log" || die "NCCL connected the workers without its SHM transport: $(grep -m3 ' via ' "$BATS_TEST_TMPDIR/tp-cold.log")"
	say "tp2 NCCL: $(grep -m1 -o 'Channel [0-9/]* : .* via SHM/[^ ]*' "$BATS_TEST_TMPDIR/tp-cold.log")"
	tokens vllm-tp >"$BATS_FILE_TMPDIR/tokens" || die "no completions from the TP=2 server"
	inside vllm-tp >"$BATS_FILE_TMPDIR/inside"
	t=$EPOCHREALTIME
	ocicp --address "$RK_DIR/containerd.sock" --namespace default create --engine vllm vllm-tp "$image"
	say "tp2 $(grep -m1 '^==> checkpoint:' <<<"$output") (wall $(secs_since "$t")s)"
	trimmed vllm-tp "API server=1" "engine core=1" "GPU worker=2"
	ocicp --address "$RK_DIR/containerd.sock" --namespace default inspect --json "$image"
	say "tp2 checkpoint image: $(($(jq -r .layer_size <<<"$output") >> 20)) MiB, $(jq -r '.annotations."org.rekindle.gpu.count"' <<<"$output") GPUs"
	ocicp '?' --address "$RK_DIR/containerd.sock" --namespace default memory --top 4 "$image"
	say "tp2 oci-checkpoint memory (exit $status):"
	say "$(sed 's/^/  /' <<<"$output")"
	run_nerdctl rm -f vllm-tp

	restore vllm-tp1 "$image"
	same_as_before vllm-tp1
	# The restored server checkpointed again with its pages images
	# compressed: the image's bytes against the restore's time.
	local zimage=rekindle.local/ckpt:vllm-tp2-pages
	echo "$zimage" >>"$BATS_TEST_TMPDIR/images"
	t=$EPOCHREALTIME
	ocicp --address "$RK_DIR/containerd.sock" --namespace default create --engine vllm --compression pages vllm-tp1 "$zimage"
	say "tp2 restored and checkpointed again, pages compressed: $(grep -m1 '^==> checkpoint:' <<<"$output") (wall $(secs_since "$t")s)"
	trimmed vllm-tp1 "API server=1" "engine core=1" "GPU worker=2"
	ocicp --address "$RK_DIR/containerd.sock" --namespace default inspect --json "$zimage"
	say "tp2 checkpoint image, pages compressed: $(($(jq -r .layer_size <<<"$output") >> 20)) MiB"
	run_nerdctl rm -f vllm-tp1
	# Its first restore: the layer out of the page cache (the model's
	# weights too: the wake reads them from the disk again).
	sync
	echo 3 >/proc/sys/vm/drop_caches
	restore vllm-tpz "$zimage"
	same_as_before vllm-tpz
	say "vllm-tpz (first, pages compressed): $(restored_line); $(pages_decoded)"
	run_nerdctl rm -f vllm-tpz
	if [ "$n" -ge 4 ]; then
		VLLM_GPUS="2 3"
		restore vllm-tp23 "$image"
		same_as_before vllm-tp23
		run_nerdctl rm -f vllm-tp23
	else
		say "tp2 onto another pair of GPUs: not run, this host has $n GPUs"
	fi

	VLLM_GPUS=1 RUN_STATUS=1 run_vllm vllm-tp-one "$image"
	is "$output" "~holds the state of 2 GPU.*given 1" "a restore onto one GPU is refused before CRIU, naming both counts"
	run_ctr task ls
	! grep -q RUNNING <<<"$output" || die "a task runs after a refused restore: $output"
}

# big_setup: the real-size model (made once), the weights service with it
# loaded as the set "big", and a registry on loopback holding the vLLM
# image, so that a checkpoint names a base that another node can pull.
# Skips where the GPU or the disk is too small.
big_setup() {
	local mib free
	mib=$(nvidia-smi --query-gpu=memory.total --format=csv,noheader,nounits -i 0 | head -1)
	[ "${mib:-0}" -ge 70000 ] || skip "the $BIG_SHAPE model wants a GPU of 80 GB or more, GPU 0 has ${mib:-no} MiB"
	if [ ! -f "$BIG_MODEL/config.json" ]; then
		# The model, and room for its checkpoint image: once in the content
		# store, and twice more (the registry, the fresh root) with the fresh
		# node (the weight set is in memory).
		local want copies=1
		[ "$FRESH_NODE" = 1 ] && copies=3
		case $BIG_SHAPE in qwen3-14b) want=$((30 + copies * 8)) ;; qwen3-32b) want=$((66 + copies * 12)) ;; *) want=$((17 + copies * 6)) ;; esac
		free=$(df -BG --output=avail "$(dirname "$BIG_MODEL")" | tail -1 | tr -dc 0-9)
		[ "$free" -ge "$want" ] || skip "making the $BIG_SHAPE model wants $want GB free in $(dirname "$BIG_MODEL"), $free GB are"
		run_cmd "$HOST_PY" "$REKINDLE_ROOT/tests/gpu/make-model.py" --shape "$BIG_SHAPE" "$BIG_MODEL"
		say "${lines[-1]}"
	fi
	weights_env
	if [ ! -f "$WEIGHTS_DIR/weights.pid" ]; then
		weights_up
		run_cmd "$BIN/rekindle-weights" load --quiet --allow containerd:default big "$BIG_MODEL"
		say "weight set big: $("$BIN/rekindle-weights" status --json big | jq -c '{bytes, load_seconds: .manifest.load_seconds, gbps: .manifest.gbps}')"
	fi
	local reg=$BATS_FILE_TMPDIR/registry
	if [ ! -f "$reg/port" ]; then
		free_port >"$reg.port"
		registry_start "$reg" "$(cat "$reg.port")"
		mv "$reg.port" "$reg/port"
	fi
	export REG=127.0.0.1:$(cat "$reg/port")
	BIG_BASE=$REG/rekindle/vllm-engine:latest
	if [ ! -f "$reg/pushed" ]; then
		run_nerdctl tag "$VLLM_IMAGE" "$BIG_BASE"
		run_nerdctl push --insecure-registry "$BIG_BASE"
		touch "$reg/pushed"
	fi
	VMODEL=$BIG_MODEL
	SET_FLAGS=(--device rekindle.dev/weights=big --env=ENGINE_WEIGHT_SET=/rekindle/weights/big --env="ENGINE_VLLM_ARGS=$BIG_ARGS")
}

# trimmed NAME WHO=N...: says the heap trims vLLM's processes in container
# NAME logged when they went to sleep (rekindle_heap.py); fails unless the
# process WHO ("API server", "engine core", "GPU worker") trimmed N times.
trimmed() {
	local name=$1 got want
	shift
	got=$("$REKINDLE_ROOT/scripts/nerdctl.sh" "$RK_DIR" logs "$name" 2>&1 | grep -o 'rekindle: [A-Za-z ]* asleep: .*' || true)
	say "$name's processes at sleep:"
	while read -r l; do say "  ${l#rekindle: }"; done <<<"$got"
	for want in "$@"; do
		[ "$(grep -c "rekindle: ${want%=*} asleep: malloc holds .* trimmed," <<<"$got")" -eq "${want#*=}" ] ||
			die "$name: the ${want%=*} should have trimmed its heap ${want#*=} time(s) before the dump (rekindle_heap.py); logged: ${got:-nothing}"
	done
}

# set_rate NAME: the last weight set load vLLM logged in container NAME.
set_rate() {
	"$REKINDLE_ROOT/scripts/nerdctl.sh" "$RK_DIR" logs "$1" 2>&1 | grep -o 'rekindle: weights from weight set.*' | tail -1
}

# bats test_tags=gpu
@test "vllm: a real-size model, weights from a weight set: cold start, checkpoint, first and cached restore, a copy with its pages compressed, and a fresh node that pulls it; same tokens, nothing compiled again" {
	skip_if_no_vllm
	vllm_setup
	big_setup
	# The image stays for the next test (teardown_file removes the stack).
	local image=$REG/rekindle/ckpt:vllm-big t cold_s
	ONE_BY_ONE=1
	t=$EPOCHREALTIME
	run_vllm vllm-big "$BIG_BASE" "${SET_FLAGS[@]}"
	wait_for "vLLM ($BIG_SHAPE) to serve" 1200 call_in vllm-big GET /health
	cold_s=$(secs_since "$t")
	tokens vllm-big >"$BATS_FILE_TMPDIR/tokens" || die "no completions from the cold server"
	ONE_BY_ONE='' tokens vllm-big >"$BATS_FILE_TMPDIR/batch"
	inside vllm-big >"$BATS_FILE_TMPDIR/inside"
	"$REKINDLE_ROOT/scripts/nerdctl.sh" "$RK_DIR" logs vllm-big >"$BATS_TEST_TMPDIR/big-cold.log" 2>&1
	[ -n "$(set_rate vllm-big)" ] ||
		die "the cold start did not load from the weight set: $(grep -m3 'rekindle' "$BATS_TEST_TMPDIR/big-cold.log")"
	say "$BIG_SHAPE cold start: nerdctl run -> serving ${cold_s}s; $(set_rate vllm-big); vLLM's phases $("$HOST_PY" "$REKINDLE_ROOT/integrations/vllm/serve.py" phases "$BATS_TEST_TMPDIR/big-cold.log")"

	t=$EPOCHREALTIME
	ocicp --address "$RK_DIR/containerd.sock" --namespace default create --engine vllm vllm-big "$image"
	say "$BIG_SHAPE $(grep -m1 '^==> checkpoint:' <<<"$output") (wall $(secs_since "$t")s)"
	# The engine core's GPU worker, inside it, trims for the process.
	trimmed vllm-big "API server=1" "GPU worker=1" "engine core=0"
	ocicp --address "$RK_DIR/containerd.sock" --namespace default inspect --json "$image"
	say "$BIG_SHAPE checkpoint image: $(($(jq -r .layer_size <<<"$output") >> 20)) MiB (the set's $(du -sm "$BIG_MODEL" | cut -f1) MiB stay out of it)"
	local layer
	layer=$RK_DIR/root/io.containerd.content.v1.content/blobs/sha256/$(jq -r '.layer_digest | sub("^sha256:"; "")' <<<"$output")
	# What holds the pages: each process and its biggest mappings.
	ocicp '?' --address "$RK_DIR/containerd.sock" --namespace default memory --top 6 "$image"
	say "oci-checkpoint memory (exit $status):"
	say "$(sed 's/^/  /' <<<"$output")"
	run_nerdctl rm -f vllm-big

	# First: the checkpoint image out of the page cache (the set stays: it is tmpfs).
	sync
	echo 3 >/proc/sys/vm/drop_caches
	# The disk floor of this run: the layer read straight from the disk
	# (O_DIRECT leaves the page cache as cold as it is).
	say "disk floor: the checkpoint layer read with O_DIRECT: $(dd if="$layer" of=/dev/null bs=64M iflag=direct 2>&1 | tail -1)"
	# CRIU's fills read several places of the layer at once: the same in
	# four O_DIRECT streams, a quarter each.
	local size q i t4 ddpids=()
	size=$(stat -c %s "$layer")
	q=$((size / 4 / (64 << 20) + 1)) t4=$EPOCHREALTIME
	for i in 0 1 2 3; do
		dd if="$layer" of=/dev/null bs=64M iflag=direct skip=$((i * q)) count=$q 2>/dev/null 3>&- &
		ddpids+=($!)
	done
	wait "${ddpids[@]}"
	say "disk floor, four streams: $(awk -v b="$size" -v s="$(secs_since "$t4")" 'BEGIN { printf "%.2f GB/s (%.2f s)", b / s / 1e9, s }')"
	restore vllm-big1 "$image" "${SET_FLAGS[@]}"
	same_as_before vllm-big1
	say "vllm-big1 (first): $(set_rate vllm-big1); the batch of four sent at once: $([ "$(ONE_BY_ONE='' tokens vllm-big1)" = "$(cat "$BATS_FILE_TMPDIR/batch")" ] && echo same tokens || echo other tokens)"
	run_nerdctl rm -f vllm-big1
	restore vllm-big2 "$image" "${SET_FLAGS[@]}"
	same_as_before vllm-big2
	say "vllm-big2 (cached): $(set_rate vllm-big2)"
	run_nerdctl rm -f vllm-big2
	# The same cached restore with nothing holding the CUDA driver: each
	# cuda-checkpoint run then initializes it anew.
	if [ -s "${REKINDLE_CUDA_HOLD_PIDFILE:-}" ]; then
		cuda_hold off
		restore vllm-big3 "$image" "${SET_FLAGS[@]}"
		say "vllm-big3 (cached, the CUDA driver not held): $(set_rate vllm-big3)"
		run_nerdctl rm -f vllm-big3
		cuda_hold on
	else
		say "a cached restore without the CUDA driver held: not run (no cuda-checkpoint --hold to stop)"
	fi
	# The first restore twice more, side by side: without the pages read
	# ahead from task create on, then with them
	# (containerd-patches/tasks-read-a-checkpoint-s-pages-images-ahead-from-ta).
	local ahead
	for ahead in false true; do
		CONTAINERD_DISABLE_READ_AHEAD=$([ "$ahead" = true ] && echo false || echo true) stack_restart
		sync
		echo 3 >/proc/sys/vm/drop_caches
		restore "vllm-big-ahead-$ahead" "$image" "${SET_FLAGS[@]}"
		same_as_before "vllm-big-ahead-$ahead"
		if [ "$ahead" = true ]; then
			say "vllm-big-ahead-true (first again, pages read ahead): $(grep -o 'checkpoint read-ahead: [^"]*' "$RK_DIR/containerd.log" | tail -1)"
		else
			say "vllm-big-ahead-false (first again, pages not read ahead)"
			run_nerdctl rm -f "vllm-big-ahead-$ahead"
		fi
	done
	# That server checkpointed again with its pages images compressed, and
	# its first restore and a cached one: the disk reads the compressed
	# bytes, the shim decodes them into memory on every core
	# (containerd-patches/runc-shim-decode-compressed-CRIU-pages-images-into-m).
	local zimage=$REG/rekindle/ckpt:vllm-big-pages
	t=$EPOCHREALTIME
	ocicp --address "$RK_DIR/containerd.sock" --namespace default create --engine vllm --compression pages vllm-big-ahead-true "$zimage"
	say "$BIG_SHAPE restored and checkpointed again, pages compressed: $(grep -m1 '^==> checkpoint:' <<<"$output") (wall $(secs_since "$t")s)"
	ocicp --address "$RK_DIR/containerd.sock" --namespace default inspect --json "$zimage"
	say "$BIG_SHAPE checkpoint image, pages compressed: $(($(jq -r .layer_size <<<"$output") >> 20)) MiB"
	run_nerdctl rm -f vllm-big-ahead-true
	sync
	echo 3 >/proc/sys/vm/drop_caches
	restore vllm-bigp1 "$zimage" "${SET_FLAGS[@]}"
	same_as_before vllm-bigp1
	say "vllm-bigp1 (first, pages compressed): $(restored_line); $(pages_decoded)"
	run_nerdctl rm -f vllm-bigp1
	restore vllm-bigp2 "$zimage" "${SET_FLAGS[@]}"
	say "vllm-bigp2 (cached, pages compressed): $(restored_line); $(pages_decoded)"
	run_nerdctl rm -f vllm-bigp2
	run_nerdctl rmi "$zimage"
	echo "$image" >"$BATS_FILE_TMPDIR/big-image"

	# A node that has nothing: a second containerd root pulls the checkpoint
	# image from the registry, and its base while restoring.
	[ "$FRESH_NODE" = 1 ] || { say "fresh node: not run (REKINDLE_VLLM_FRESH_NODE=$FRESH_NODE)"; return; }
	run_nerdctl push --insecure-registry "$image"
	local fresh=$BATS_FILE_TMPDIR/fresh pull_s
	"$REKINDLE_ROOT/scripts/containerd-up.sh" "$fresh" 3>&-
	t=$EPOCHREALTIME
	RK_DIR=$fresh run_nerdctl pull --insecure-registry "$image"
	pull_s=$(secs_since "$t")
	RK_DIR=$fresh restore vllm-fresh "$image" "${SET_FLAGS[@]}"
	RK_DIR=$fresh same_as_before vllm-fresh
	say "fresh node: pull ${pull_s}s, then the restore above (the base pulled by containerd); cold start was ${cold_s}s"
	RK_DIR=$fresh run_nerdctl rm -f vllm-fresh
}

# bats test_tags=gpu
@test "vllm: a weight set of another model fails the wake, naming the set and the tensor, and the engine stays asleep; the right set loaded anew restores" {
	skip_if_no_vllm
	[ -f "$BATS_FILE_TMPDIR/big-image" ] || skip "needs the checkpoint image that the real-size test before it makes"
	vllm_setup
	big_setup
	local image wrong=$BATS_FILE_TMPDIR/wrong tensor=model.layers.0.mlp.up_proj.weight
	image=$(cat "$BATS_FILE_TMPDIR/big-image")
	# The model's files, one tensor's shape swapped in its file's header:
	# the same sizes, so CRIU maps them where the set's files were.
	mkdir -p "$wrong"
	cp -l "$BIG_MODEL"/*.safetensors "$wrong/" 2>/dev/null || cp "$BIG_MODEL"/*.safetensors "$wrong/"
	"$HOST_PY" - "$wrong" "$tensor" <<-'EOF' || die "cannot make the other set"
		import glob, json, os, shutil, struct, sys
		for path in sorted(glob.glob(sys.argv[1] + "/*.safetensors")):
		    with open(path, "rb") as f:
		        n = struct.unpack("<Q", f.read(8))[0]
		        head = f.read(n)
		    ent = json.loads(head).get(sys.argv[2])
		    if ent is None:
		        continue
		    a, b = ent["shape"]
		    at = head.index(json.dumps(sys.argv[2]).encode())  # this tensor's entry, written compact or not
		    new = head
		    for sep in ((",", ":"), (", ", ": ")):
		        old = json.dumps([a, b], separators=sep).encode()
		        i = head.find(old, at)
		        if i >= 0 and i < head.find(b"}", at):
		            new = head[:i] + json.dumps([b, a], separators=sep).encode() + head[i + len(old):]
		            break
		    if new == head:
		        sys.exit("cannot find the shape of " + sys.argv[2] + " in " + path)
		    shutil.copy(path, path + ".new")  # not through the link to the model's file
		    with open(path + ".new", "r+b") as f:
		        f.seek(8)
		        f.write(new)
		    os.rename(path + ".new", path)
		    sys.exit(0)
		sys.exit("no file holds " + sys.argv[2])
	EOF
	run_cmd "$BIN/rekindle-weights" evict big
	run_cmd "$BIN/rekindle-weights" load --quiet --allow containerd:default big "$wrong"
	run_vllm vllm-wrong "$image" "${SET_FLAGS[@]}"
	local st
	st=$(wake_status vllm-wrong)
	say "vllm-wrong: $(jq -c '{outcome, error}' <<<"$st")"
	is "$(jq -r .outcome <<<"$st")" failed "the wake fails"
	is "$st" "~collective_rpc" "the status names the call that failed"
	# vLLM's answer may carry the exception's text or not; its log does.
	is "$("$REKINDLE_ROOT/scripts/nerdctl.sh" "$RK_DIR" logs vllm-wrong 2>&1)" "~weight set big .*tensor $tensor is BF16" \
		"the engine's log names the set and the tensor"
	is "$(call_in vllm-wrong GET /is_sleeping | jq -r .is_sleeping)" true "the engine stays asleep"
	run_nerdctl rm -f vllm-wrong
	# The right set again, loaded anew (other files at the same path, as
	# after a reboot): the mapping restored over them is judged and copied
	# from, through the registration the CUDA restore brings back.
	run_cmd "$BIN/rekindle-weights" evict big
	run_cmd "$BIN/rekindle-weights" load --quiet --allow containerd:default big "$BIG_MODEL"
	rm -rf "$wrong"
	ONE_BY_ONE=1
	restore vllm-reloaded "$image" "${SET_FLAGS[@]}"
	same_as_before vllm-reloaded
	say "vllm-reloaded (the set loaded anew): $(set_rate vllm-reloaded)"
	run_nerdctl rm -f vllm-reloaded
}

# big70_setup: for the 70B-class model, the tensor parallel size these GPUs
# need (TP70, the GPUs in VLLM_GPUS), its model folder (made once) and its
# weight set "big70". Skips, naming what is short, where the host cannot
# hold it: the GPUs, the memory for the set, the disk for the model folder.
big70_setup() {
	local n mib gb tp=1 memgb free want
	n=$(nvidia-smi -L | wc -l)
	mib=$(nvidia-smi --query-gpu=memory.total --format=csv,noheader,nounits -i 0 | head -1)
	gb=$((mib * 1048576 / 1000000000))
	# Each GPU holds its share of the weights and 10 GB more (context,
	# activations, CUDA graphs, a KV cache) in 90% of its memory.
	while [ $((tp * gb * 9 / 10)) -lt $((BIG70_GB + tp * 10)) ] && [ "$tp" -le 8 ]; do
		tp=$((tp * 2))
	done
	[ "$tp" -le "$n" ] || skip "the 70B-class model ($BIG70_GB GB of weights) wants tensor parallel $tp on GPUs of $gb GB, this host has $n"
	memgb=$(awk '/^MemTotal:/ { printf "%d", $2 * 1024 / 1e9 }' /proc/meminfo)
	# The set, and each process's host state and its image in the page cache.
	want=$((BIG70_GB + 16 + tp * 8))
	[ "$memgb" -ge "$want" ] || skip "the 70B-class model's weight set and processes want $want GB of memory, this host has $memgb GB"
	if [ ! -f "$BIG70_MODEL/config.json" ]; then
		free=$(df -B1 --output=avail "$(dirname "$BIG70_MODEL")" | tail -1 | awk '{ printf "%d", $1 / 1e9 }')
		want=$((BIG70_GB + 4 + tp * 4))
		[ "$free" -ge "$want" ] || skip "making the 70B-class model wants $want GB free in $(dirname "$BIG70_MODEL"), $free GB are (bench/vllm-random-weights serves its shape without the weights)"
		run_cmd "$HOST_PY" "$REKINDLE_ROOT/tests/gpu/make-model.py" --shape llama-70b "$BIG70_MODEL"
		say "${lines[-1]}"
	fi
	weights_env
	[ -f "$WEIGHTS_DIR/weights.pid" ] || weights_up
	if ! "$BIN/rekindle-weights" status --json big70 >/dev/null 2>&1; then
		run_cmd "$BIN/rekindle-weights" load --quiet --allow containerd:default big70 "$BIG70_MODEL"
		say "weight set big70: $("$BIN/rekindle-weights" status --json big70 | jq -c '{bytes, load_seconds: .manifest.load_seconds, gbps: .manifest.gbps}')"
	fi
	TP70=$tp VMODEL=$BIG70_MODEL
	VLLM_GPUS=$(seq -s ' ' 0 $((tp - 1)))
	SET70_FLAGS=(--device rekindle.dev/weights=big70 --env=ENGINE_WEIGHT_SET=/rekindle/weights/big70
		--env="ENGINE_VLLM_ARGS=--max-model-len 2048 --gpu-memory-utilization 0.9 --tensor-parallel-size $tp")
}

# bats test_tags=gpu
@test "vllm: a 70B-class model (Llama-3.1-70B's shape), weights from a weight set, tensor parallel over the GPUs it needs: cold start, checkpoint, first and cached restore, same tokens" {
	skip_if_no_vllm
	vllm_setup
	big70_setup
	local image=rekindle.local/ckpt:vllm-70b t cold_s
	echo "$image" >>"$BATS_TEST_TMPDIR/images"
	ONE_BY_ONE=1
	t=$EPOCHREALTIME
	run_vllm vllm-70b "$VLLM_IMAGE" "${SET70_FLAGS[@]}"
	wait_for "vLLM (llama-70b, tensor parallel $TP70) to serve" 1500 call_in vllm-70b GET /health
	cold_s=$(secs_since "$t")
	tokens vllm-70b >"$BATS_FILE_TMPDIR/tokens" || die "no completions from the cold server"
	inside vllm-70b >"$BATS_FILE_TMPDIR/inside"
	"$REKINDLE_ROOT/scripts/nerdctl.sh" "$RK_DIR" logs vllm-70b >"$BATS_TEST_TMPDIR/70b-cold.log" 2>&1
	[ -n "$(set_rate vllm-70b)" ] ||
		die "the cold start did not load from the weight set: $(grep -m3 'rekindle' "$BATS_TEST_TMPDIR/70b-cold.log")"
	say "llama-70b, tensor parallel $TP70, cold start: nerdctl run -> serving ${cold_s}s; $(set_rate vllm-70b); vLLM's phases $("$HOST_PY" "$REKINDLE_ROOT/integrations/vllm/serve.py" phases "$BATS_TEST_TMPDIR/70b-cold.log")"

	t=$EPOCHREALTIME
	ocicp --address "$RK_DIR/containerd.sock" --namespace default create --engine vllm vllm-70b "$image"
	say "llama-70b $(grep -m1 '^==> checkpoint:' <<<"$output") (wall $(secs_since "$t")s)"
	ocicp --address "$RK_DIR/containerd.sock" --namespace default inspect --json "$image"
	say "llama-70b checkpoint image: $(($(jq -r .layer_size <<<"$output") >> 20)) MiB, $(jq -r '.annotations."org.rekindle.gpu.count"' <<<"$output") GPUs (the set's $BIG70_GB GB stay out of it)"
	run_nerdctl rm -f vllm-70b

	sync
	echo 3 >/proc/sys/vm/drop_caches
	restore vllm-70b1 "$image" "${SET70_FLAGS[@]}"
	same_as_before vllm-70b1
	say "vllm-70b1 (first, page cache dropped): $(restored_line); $(set_rate vllm-70b1)"
	run_nerdctl rm -f vllm-70b1
	restore vllm-70b2 "$image" "${SET70_FLAGS[@]}"
	same_as_before vllm-70b2
	say "vllm-70b2 (cached): $(restored_line); $(set_rate vllm-70b2)"
	run_nerdctl rm -f vllm-70b2
}
