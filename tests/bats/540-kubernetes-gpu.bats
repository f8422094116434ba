#!/usr/bin/env bats
# GPU, Kubernetes: a real vLLM server (the vllm-engine image, the host's
# Python and vLLM as hostPath volumes) in a pod of the single-node cluster
# (scripts/kube-up.sh) on the file's containerd, its GPU given by NVIDIA's
# device plugin through CDI (--device-list-strategy cdi-cri: the kubelet
# hands containerd CDI device names; a pod's own cdi.k8s.io annotations never
# reach its container). `oci-checkpoint create NAMESPACE/POD/CONTAINER
# --engine vllm` checkpoints it, the image goes to a loopback registry, and a
# Deployment of the image pulls it and is restored, not started: containerd
# logs the restore and its phases, the wake helper resumes vLLM, the pod turns
# ready, and its greedy tokens (one prompt, then each prompt of a batch alone)
# and processes are the ones from before the checkpoint, with nothing
# compiled again.
#
# The pods use the node's network: GPU hosts may lack the iptables a CNI
# bridge masquerades with (500 runs its engine on the host network too).
# /dev/shm: CRI binds it into a container from the pod's sandbox, outside the
# container, so CRIU does not carry it; vLLM maps a POSIX semaphore there
# under a name it has renamed, which CRIU restores only from the link_remap
# file beside it. The checkpoint carries the sandbox's /dev/shm
# (devshm-checkpoint.tar) and the CRI restore lays it down before CRIU runs
# (342 tests that on the CPU; docs/kubernetes.md, "A GPU pod": it passed on an
# H200; the two runs before it was carried failed there).
#
# Runs on a GPU host (tests/gpu/run.sh with a bundle made by
# GPU_BUNDLE_KUBE=1 scripts/gpu-bundle.sh); everywhere else every test
# skips and says why.
#
#   REKINDLE_VLLM_SITE   host folder holding vLLM (default /var/tmp/vllm-site)
#   REKINDLE_VLLM_MODEL  model folder (default /var/tmp/rekindle-vllm-model; made by
#                        tests/gpu/make-model.py when absent)
#   REKINDLE_VLLM_ARGS   more vllm serve flags (default: --max-model-len 2048 --gpu-memory-utilization 0.4)
#   REKINDLE_PYTHON      host interpreter with torch (default python3)

load helpers
load cri
load kube
load gpu

VLLM_IMAGE=rekindle.local/vllm-engine:latest
SITE=${REKINDLE_VLLM_SITE:-/var/tmp/vllm-site}
MODEL=${REKINDLE_VLLM_MODEL:-/var/tmp/rekindle-vllm-model}
VARGS=${REKINDLE_VLLM_ARGS:---max-model-len 2048 --gpu-memory-utilization 0.4}
HOST_PY=${REKINDLE_PYTHON:-python3}
ONE='{"model": "/models/model", "prompt": "Rekindle restores warm GPU engines in seconds.", "max_tokens": 32, "temperature": 0, "ignore_eos": true, "return_token_ids": true}'
BATCH='["def main():", "import os, sys", "class Engine:", "    return self"]'

# skip_if_no_kgpu: a GPU, the cluster, the device plugin, vLLM and its image.
# (Each test skips on its own: the bats of Debian 12 fails a file whose
# setup_file skips.)
skip_if_no_kgpu() {
	skip_if_no_gpu
	need_kube
	[ -x "$KBIN/nvidia-device-plugin" ] ||
		skip "$KBIN/nvidia-device-plugin is not built (run 'make device-plugin')"
	PYTHONPATH=$SITE "$HOST_PY" -c 'import vllm' 2>/dev/null ||
		skip "no vLLM importable from $SITE with $HOST_PY: install vLLM 0.24.0 there (pip install --target $SITE vllm==0.24.0; images/README.md, vLLM engine) or set REKINDLE_VLLM_SITE"
	need_built
	VLLM_TAR=
	local tar
	for tar in "$IMAGES/vllm-engine.tar" "$BIN/../images/vllm-engine.tar"; do
		[ -f "$tar" ] && VLLM_TAR=$tar && break
	done
	[ -n "$VLLM_TAR" ] || skip "vllm-engine.tar is in neither $IMAGES nor $BIN/../images: run 'make build/images/vllm-engine.tar'"
}

# kgpu_setup: once per file: the model, containerd with the engine and
# sandbox images in CRI's namespace, the registry, the cluster, the device
# plugin, and the pod volumes of the host's Python. Sets what the tests use.
kgpu_setup() {
	export RK_DIR=$BATS_FILE_TMPDIR/rk REGISTRY_DIR=$BATS_FILE_TMPDIR/registry
	export CONTAINERD_ADDRESS=$RK_DIR/containerd.sock KUBECONFIG=$RK_DIR/kube/kubeconfig
	if [ -f "$BATS_FILE_TMPDIR/up" ]; then
		. "$BATS_FILE_TMPDIR/up"
		return
	fi
	[ -f "$MODEL/config.json" ] || run_cmd "$HOST_PY" "$REKINDLE_ROOT/tests/gpu/make-model.py" "$MODEL"
	touch "$BATS_FILE_TMPDIR/stack-up"
	HTTPS_PROXY=$OFFLINE_PROXY HTTP_PROXY=$OFFLINE_PROXY NO_PROXY= stack_up
	k8s_ctr images import "$VLLM_TAR" >/dev/null || die "cannot import $VLLM_TAR into namespace k8s.io"
	# The sandbox ("pause") image: the engine image's Debian, sleeping.
	local sandbox
	sandbox=$("$BIN/containerd" --config "$RK_DIR/config.toml" config dump 2>/dev/null |
		sed -n "s/^ *sandbox = ['\"]\(.*\)['\"]$/\1/p")
	[ -n "$sandbox" ] || die "no sandbox image in containerd's config dump"
	make_pause_image "$VLLM_TAR" "$sandbox" "$BATS_FILE_TMPDIR/pause.tar"
	k8s_ctr images import "$BATS_FILE_TMPDIR/pause.tar" >/dev/null || die "cannot import the sandbox image $sandbox"
	rm -f "$BATS_FILE_TMPDIR/pause.tar"

	local rport
	rport=$(free_port)
	registry_start "$REGISTRY_DIR" "$rport"
	kube_up
	device_plugin_up
	PYTHONPATH=$SITE "$REKINDLE_ROOT/images/gpu-engine/host-python.sh" --pod "$(command -v "$HOST_PY")" \
		>"$BATS_FILE_TMPDIR/pod-python.json" || die "host-python.sh --pod failed"
	printf 'CKPT=%s\nPORT=%s\n' "127.0.0.1:$rport/rekindle/vllm:ckpt" "$(free_port)" >"$BATS_FILE_TMPDIR/up"
	. "$BATS_FILE_TMPDIR/up"
	say "vLLM $(PYTHONPATH=$SITE "$HOST_PY" -c 'import vllm; print(vllm.__version__)') from $SITE, model $MODEL, port $PORT; $(jq '.volumes | length' "$BATS_FILE_TMPDIR/pod-python.json") hostPath volumes for the host's Python"
}

teardown_file() {
	[ -f "$BATS_FILE_TMPDIR/stack-up" ] || return 0
	export RK_DIR=$BATS_FILE_TMPDIR/rk
	if [ -f "$BATS_FILE_TMPDIR/device-plugin.pid" ]; then
		kill "$(cat "$BATS_FILE_TMPDIR/device-plugin.pid")" 2>/dev/null || true
	fi
	# The cluster's logs, for a failure's reading (kube-down.sh removes its folder).
	cp -r "$RK_DIR/kube/logs" "$BATS_FILE_TMPDIR/kube-logs" 2>/dev/null || true
	kube_down
	# The device plugin's CDI spec, when this file's plugin wrote it.
	if [ -f "$BATS_FILE_TMPDIR/device-plugin.spec" ]; then
		rm -f "$(cat "$BATS_FILE_TMPDIR/device-plugin.spec")"
	fi
	registry_stop "$BATS_FILE_TMPDIR/registry"
	stack_down
}

# device_plugin_up: NVIDIA's device plugin beside the kubelet, as a host
# process (its DaemonSet would run the same binary in a pod); both meet in
# /var/lib/kubelet/device-plugins, where each has its socket whatever the
# kubelet's --root-dir. It writes its CDI spec to /var/run/cdi, which the
# file's containerd reads (containerd-config.sh).
device_plugin_up() {
	local log=$BATS_FILE_TMPDIR/device-plugin.log spec=/var/run/cdi/k8s.device-plugin.nvidia.com-gpu.json
	[ -e "$spec" ] || echo "$spec" >"$BATS_FILE_TMPDIR/device-plugin.spec"
	setsid "$KBIN/nvidia-device-plugin" --device-list-strategy cdi-cri --driver-root / --driver-root-ctr-path / \
		--nvidia-cdi-hook-path "$BIN/nvidia-cdi-hook" </dev/null >"$log" 2>&1 3>&- &
	echo $! >"$BATS_FILE_TMPDIR/device-plugin.pid"
	node_gpus() { [ "$(kubectl get nodes -o jsonpath='{.items[0].status.allocatable.nvidia\.com/gpu}')" -ge 1 ]; }
	wait_for "the device plugin to give the node an nvidia.com/gpu (its log: $log)" 90 node_gpus ||
		{ sed 's/^/#   /' "$log" >&2; false; }
	say "device plugin: node allocatable nvidia.com/gpu=$(kubectl get nodes -o jsonpath='{.items[0].status.allocatable.nvidia\.com/gpu}'), CDI spec $spec"
}

# pod_spec IMAGE PULL RESTART: the vLLM pod's spec (JSON), on one GPU of the
# device plugin's, the host's Python, vLLM and the model bound in.
pod_spec() {
	jq -c --arg image "$1" --arg pull "$2" --arg restart "$3" --arg port "$PORT" --arg model "$MODEL" \
		--arg vargs "$VARGS" '{
		hostNetwork: true, automountServiceAccountToken: false,
		terminationGracePeriodSeconds: 5, restartPolicy: $restart,
		containers: [{name: "engine", image: $image, imagePullPolicy: $pull,
			env: (.env + [{name: "ENGINE_PORT", value: $port}, {name: "ENGINE_VLLM_ARGS", value: $vargs}]),
			resources: {limits: {"nvidia.com/gpu": 1}},
			volumeMounts: (.volumeMounts + [{name: "model", mountPath: "/models/model", readOnly: true}]),
			readinessProbe: {httpGet: {path: "/health", port: ($port | tonumber)}, periodSeconds: 1, failureThreshold: 1}}],
		volumes: (.volumes + [{name: "model", hostPath: {path: $model}}])}' "$BATS_FILE_TMPDIR/pod-python.json"
}

# vcall METHOD PATH [JSON]: one HTTP call to the vLLM on the node's PORT.
vcall() {
	curl -fsS --max-time 120 -X "$1" ${3:+-H 'Content-Type: application/json' -d "$3"} "http://127.0.0.1:$PORT$2"
}

# tokens: the greedy token ids of ONE, then of each of BATCH's prompts sent
# alone (vLLM is not batch-invariant: DESIGN.md, Known hazards).
tokens() {
	local p ids=()
	ids+=("$(vcall POST /v1/completions "$ONE" | jq -ce '.choices[0].token_ids')") || return 1
	while read -r p; do
		ids+=("$(vcall POST /v1/completions "$(jq -c --argjson p "$p" '.prompt = $p | .max_tokens = 24' <<<"$ONE")" |
			jq -ce '.choices[0].token_ids')") || return 1
	done < <(jq -c '.[]' <<<"$BATCH")
	jq -sc . <<<"${ids[*]}"
}

# procs POD: the pid and command of each process in POD's engine container
# (the wake helper and this listing's own left out).
procs() {
	kubectl exec "$1" -- sh -c '
		for p in /proc/[0-9]*; do
			n=${p#/proc/}; [ "$n" = $$ ] && continue
			c=$(tr "\0" " " <"$p/cmdline" 2>/dev/null | cut -c1-60); [ -n "$c" ] || continue
			case "$c" in "/.rekindle/rekindle-wake "* | "sh -c"* | "tr "* | "cut "* | "sort "*) continue ;; esac
			echo "pid $n $c"
		done | sort -n -k2'
}

# wait_ready POD SECONDS: wait until POD is ready; fail at once, with its
# events, containerd's last errors and the engine's log, when its container
# cannot be created, has exited or crash-loops.
wait_ready() {
	local pod=$1 i s why
	for ((i = 0; i < $2; i++)); do
		s=$(kubectl get pod "$pod" -o json 2>/dev/null) || s='{}'
		[ "$(jq -r '.status.conditions[]? | select(.type == "Ready") | .status' <<<"$s")" != True ] || return 0
		why=$(jq -r '.status.containerStatuses[0].state | (.waiting.reason // "") + (if .terminated then "exited " + (.terminated.exitCode | tostring) else "" end)' <<<"$s" 2>/dev/null)
		case $why in *Error* | *BackOff* | *exited* | ErrImage*) break ;; esac
		sleep 1
	done
	echo "# pod $pod: ${why:-not ready after $2 s}; its events:" >&2
	events_of "$pod" | sed 's/^/#   /' >&2
	echo "# containerd's last errors:" >&2
	grep -E 'level=(error|warning)' "$RK_DIR/containerd.log" | tail -15 | cut -c1-600 | sed 's/^/#   /' >&2
	echo "# the engine's log:" >&2
	kubectl logs "$pod" 2>&1 | tail -30 | sed 's/^/#   /' >&2
	die "pod $pod did not become ready: ${why:-timed out after $2 s}"
}

# wake_outcome POD: the wake helper's record in POD, once it holds an outcome.
wake_outcome() {
	recorded() { kubectl exec "$1" -- cat /.rekindle/status 2>/dev/null | grep -q '"outcome"'; }
	wait_for "the wake helper in $1 to record its outcome" 120 recorded "$1"
	kubectl exec "$1" -- cat /.rekindle/status
}

# bats test_tags=gpu
@test "kubelet, GPU: vLLM in a pod, checkpointed by namespace/pod/container, pushed, restored as a Deployment's pod on a device plugin GPU: restored, ready, same greedy tokens, nothing compiled again" {
	skip_if_no_kgpu
	kgpu_setup
	local t cold
	t=$EPOCHREALTIME
	jq -c '{apiVersion: "v1", kind: "Pod", metadata: {name: "vllm-src", labels: {app: "vllm-src"}}, spec: .}' \
		<<<"$(pod_spec "$VLLM_IMAGE" Never Never)" | kubectl apply -f - >&2
	wait_ready vllm-src 480
	cold=$(secs_since "$t")
	tokens >"$BATS_FILE_TMPDIR/tokens" || die "no completions from the cold server"
	procs vllm-src >"$BATS_FILE_TMPDIR/procs"
	kubectl logs vllm-src >"$BATS_TEST_TMPDIR/cold.log" 2>&1
	local ph
	ph=$("$HOST_PY" "$REKINDLE_ROOT/integrations/vllm/serve.py" phases "$BATS_TEST_TMPDIR/cold.log")
	say "cold start: kubectl apply -> ready ${cold}s; vLLM's log: $ph"
	[ "$(jq -r .compile_lines <<<"$ph")" -gt 0 ] || die "vLLM logged no compilation at its cold start: the test could not see one after the restore"
	say "GPU in the pod: $(kubectl exec vllm-src -- sh -c 'ls /dev/nvidia[0-9]*' | tr '\n' ' ')(from the device plugin's CDI spec)"
	say "in the container: $(tr '\n' '|' <"$BATS_FILE_TMPDIR/procs")"

	t=$EPOCHREALTIME
	ocicp -n k8s.io create --engine vllm --port "$PORT" default/vllm-src/engine "$CKPT"
	say "$(grep -m1 '^==> checkpoint:' <<<"$output") (wall $(secs_since "$t")s)"
	ocicp -n k8s.io inspect --json "$CKPT"
	say "checkpoint image: $(($(jq -r .layer_size <<<"$output") >> 20)) MiB, GPU $(jq -r '.annotations."org.rekindle.gpu.model"' <<<"$output")"
	kube_do delete pod vllm-src --wait
	t=$EPOCHREALTIME
	run_cmd "$REKINDLE_ROOT/scripts/nerdctl.sh" "$RK_DIR" -n k8s.io push --insecure-registry "$CKPT"
	say "push to the loopback registry: $(secs_since "$t")s"
	# The Deployment pulls it from the registry; its extracted copy goes with it.
	run_cmd k8s_ctr images rm --sync "$CKPT"

	t=$EPOCHREALTIME
	jq -c '{apiVersion: "apps/v1", kind: "Deployment", metadata: {name: "vllm"},
		spec: {replicas: 1, selector: {matchLabels: {app: "vllm"}},
			template: {metadata: {labels: {app: "vllm"}}, spec: .}}}' \
		<<<"$(pod_spec "$CKPT" IfNotPresent Always)" | kubectl apply -f - >&2
	# What a client polling the node's port sees, from the apply on.
	"$HOST_PY" "$REKINDLE_ROOT/tests/gpu/first-token.py" "$PORT" "$t" "$(jq -c '.max_tokens = 1' <<<"$ONE")" \
		>"$BATS_TEST_TMPDIR/first-token.json" 2>&1 3>&- &
	local ft_pid=$! pod ready_s
	wait_for "a pod of vllm" 60 has_pods vllm
	pod=$(pods_of vllm)
	wait_ready "$pod" 300
	ready_s=$(secs_since "$t")
	wait "$ft_pid" || die "no first token from the restored server: $(cat "$BATS_TEST_TMPDIR/first-token.json")"

	restored_by_containerd "$(container_id "$pod")"
	local st ft
	st=$(wake_outcome "$pod")
	is "$(jq -r .outcome <<<"$st")" resumed "wake outcome in $pod (/.rekindle/status: $st)"
	ft=$(cat "$BATS_TEST_TMPDIR/first-token.json")
	say "restore: $(restored_line)"
	say "restore: $(events_of "$pod" | grep -m1 '^Pulled:'); kubectl apply -> ready ${ready_s}s, awake $(jq -r .awake_s <<<"$ft")s (resume $(jq -r .resume_seconds <<<"$st")s), first token $(jq -r .token_s <<<"$ft")s; cold start was ${cold}s"
	is "$(tokens)" "$(cat "$BATS_FILE_TMPDIR/tokens")" "$pod: greedy tokens, one prompt and four alone"
	is "$(procs "$pod")" "$(cat "$BATS_FILE_TMPDIR/procs")" "$pod: the same processes (pids and commands) as before the checkpoint"
	kubectl logs "$pod" >"$BATS_TEST_TMPDIR/restored.log" 2>&1
	is "$("$HOST_PY" "$REKINDLE_ROOT/integrations/vllm/serve.py" phases "$BATS_TEST_TMPDIR/restored.log" | jq -r .compile_lines)" 0 \
		"$pod: vLLM logged no compilation after the restore"
	kube_do delete deployment vllm --wait
	wait_for "the pods of vllm to go" 120 no_pods vllm
}
