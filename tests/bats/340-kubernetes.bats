#!/usr/bin/env bats
# Kubernetes for real: a kubelet (scripts/kube-up.sh, built by make
# kubernetes) on the file's containerd runs the CPU engine in a Deployment,
# oci-checkpoint checkpoints its pod's container, and a Deployment of the
# checkpoint image, pulled from a loopback registry, restores every replica.
# Pods have their own network (a CNI bridge): the engine listens on
# 0.0.0.0:30000 in each, and the tests reach it on the pod's address.

load helpers
load cri
load kube

setup_file() {
	need_built crictl
	need_kube
	cri_up
	export REGISTRY_PORT REGISTRY_DIR=$BATS_FILE_TMPDIR/registry
	REGISTRY_PORT=$(free_port)
	registry_start "$REGISTRY_DIR" "$REGISTRY_PORT"
	kube_up
	export CKPT=127.0.0.1:$REGISTRY_PORT/rekindle/engine:ckpt
}

teardown_file() {
	kube_down
	[ -n "${REGISTRY_DIR:-}" ] && registry_stop "$REGISTRY_DIR"
	stack_down
}

# record_pod POD: remember its engine's answer and identity in E_*.
record_pod() {
	E_TEXT=$(at "$1" POST /generate "$PROMPT" | jq -r .text)
	answered "before the checkpoint" "$E_TEXT"
	E_PID=$(at "$1" GET /state | jq -r .pid)
	E_START=$(at "$1" GET /state | jq -r .start_time)
}

# assert_restored POD: POD's engine is the checkpointed process, resumed,
# and containerd restored its container (not started it) with phase times.
assert_restored() {
	local pod=$1 id
	id=$(container_id "$pod")
	is "$(at "$pod" GET /state | jq -r .start_time)" "$E_START" "start time in $pod: restored, not restarted"
	is "$(at "$pod" GET /state | jq -r .pid)" "$E_PID" "engine pid in $pod"
	is "$(at "$pod" POST /generate "$PROMPT" | jq -r .text)" "$E_TEXT" "greedy output of $pod"
	logged "Restored container $id successfully"
	logged "restored from checkpoint image .*criu-restore=[0-9.]*s"
}

@test "kubelet: oci-checkpoint checkpoints a Deployment's pod by namespace, pod and container name" {
	deployment src "$ENGINE_IMAGE" 1 Never
	wait_for "Deployment src ready" 120 ready_replicas src 1
	local pod
	pod=$(pods_of src)
	record_pod "$pod"

	run_cmd "$BIN/oci-checkpoint" --address "$RK_DIR/containerd.sock" -n k8s.io create --port 30000 \
		"default/$pod/engine" "$CKPT"
	run_cmd "$REKINDLE_ROOT/scripts/nerdctl.sh" "$RK_DIR" -n k8s.io push --insecure-registry "$CKPT"
	kube_do delete deployment src --wait
	wait_for "the pods of src to go" 60 no_pods src
	# The restores below pull it from the registry.
	run_cmd k8s_ctr images rm --sync "$CKPT"
	printf '%s\n' "$E_TEXT" "$E_PID" "$E_START" >"$BATS_FILE_TMPDIR/recorded"
}

load_recorded() {
	[ -f "$BATS_FILE_TMPDIR/recorded" ] || skip "the checkpoint test did not run"
	{ read -r E_TEXT; read -r E_PID; read -r E_START; } <"$BATS_FILE_TMPDIR/recorded"
}

@test "kubelet: a Deployment of the checkpoint image scales to 3, every pod restored, ready, answering as before" {
	load_recorded
	deployment engine "$CKPT" 3
	wait_for "Deployment engine: 3 ready replicas" 180 ready_replicas engine 3
	local pod
	for pod in $(pods_of engine); do assert_restored "$pod"; done
	pod=$(pods_of engine | head -1)

	# logs, exec, port-forward.
	kube_do logs "$pod"
	[[ $output == *"weights loaded"* ]] || die "kubectl logs $pod shows nothing the restored engine wrote"
	local state
	state=$(at "$pod" GET '/state?verify=1')
	weights_intact - "$pod" "$KBIN/kubectl" --kubeconfig "$RK_DIR/kube/kubeconfig" exec <<<"$state"
	local lport pf
	lport=$(free_port)
	"$KBIN/kubectl" --kubeconfig "$RK_DIR/kube/kubeconfig" port-forward "pod/$pod" "$lport:30000" \
		>"$BATS_TEST_TMPDIR/pf.log" 2>&1 3>&- &
	pf=$!
	wait_for "kubectl port-forward on $lport" 30 engine GET "$lport" /health
	is "$(engine POST "$lport" /generate "$PROMPT" | jq -r .text)" "$E_TEXT" "greedy output through port-forward"
	kill "$pf"

	# A deleted pod is replaced by a restored one.
	kube_do delete pod "$pod" --wait
	wait_for "Deployment engine: 3 ready replicas again" 120 ready_replicas engine 3
	for pod in $(pods_of engine); do assert_restored "$pod"; done
}

@test "kubelet: a restored engine that dies is restarted by kubelet, restored again" {
	load_recorded
	ready_replicas engine 3 || skip "the scale-up test did not leave 3 replicas"
	local pod id pid
	pod=$(pods_of engine | head -1)
	id=$(container_id "$pod")
	pid=$(cri inspect "$id" | jq -r .info.pid)
	kill -KILL "$pid"
	restarted() { [ "$(kubectl get pod "$pod" -o jsonpath='{.status.containerStatuses[0].restartCount}')" = 1 ]; }
	wait_for "kubelet to restart $pod's engine" 120 restarted
	wait_for "Deployment engine: 3 ready replicas" 120 ready_replicas engine 3
	[ "$(container_id "$pod")" != "$id" ] || die "the restarted container has the old ID"
	assert_restored "$pod"
}

@test "kubelet: scaling to 0 leaves nothing on the node but the checkpoint cache" {
	ready_replicas engine 3 || skip "the scale-up test did not leave 3 replicas"
	kube_do scale deployment engine --replicas 0
	wait_for "the pods of engine to go" 120 no_pods engine
	# Only the sandboxes of no pod, no containers, no engine process.
	run_cmd cri ps -a -q
	is "$output" "" "CRI containers left"
	run_cmd cri pods -q
	is "$output" "" "pod sandboxes left"
	[ -z "$(pids_with_env ENGINE_PORT=30000)" ] || die "engine processes left: $(pids_with_env ENGINE_PORT=30000)"
	# Addresses: host-local keeps one file per allocated address.
	run ls "$RK_DIR/kube/cni-ipam/rekindle-kube"
	[[ $output != *10.244.* ]] || die "pod addresses still allocated: $output"
	# Pod cgroups: only the QoS levels kubelet keeps.
	local left
	left=$(find /sys/fs/cgroup/memory/rk-kube -mindepth 1 -type d -name 'pod*')
	[ -z "$left" ] || die "pod cgroups left: $left"
	left=$(awk -v d="$RK_DIR/kube/kubelet/pods/" 'index($5, d) == 1 {print $5}' /proc/self/mountinfo)
	[ -z "$left" ] || die "pod volume mounts left: $left"
	run_cmd k8s_ctr snapshots ls
	[[ $output != *checkpoint-restore/* ]] || die "a restore's snapshot is left: $output"
	kube_do delete deployment engine
}

# pids_with_env VAR=VALUE: processes whose environment holds VAR=VALUE.
pids_with_env() {
	local p
	for p in /proc/[0-9]*; do
		tr '\0' '\n' <"$p/environ" 2>/dev/null | grep -qx -- "$1" && echo "${p#/proc/}"
	done
	return 0
}

@test "kubelet: a checkpoint image the node's policy refuses never runs; the pod's events name the policy" {
	load_recorded
	local other=rekindle.other/engine:ckpt
	run_cmd "$REKINDLE_ROOT/scripts/nerdctl.sh" "$RK_DIR" -n k8s.io pull --insecure-registry "$CKPT"
	run_cmd k8s_ctr images tag "$CKPT" "$other"
	deployment refused "$other" 1 Never
	local pod
	wait_for "a pod of refused" 60 pods_of refused
	pod=$(pods_of refused)
	refused() { events_of "$pod" | grep -q "checkpoint_restore_images"; }
	wait_for "an event of $pod naming the policy" 60 refused
	events_of "$pod" | grep checkpoint_restore_images >&2
	is "$(kubectl get pod "$pod" -o jsonpath='{.status.containerStatuses[0].state.waiting.reason}')" \
		CreateContainerError "waiting reason"
	run_cmd cri ps -a -q --label "io.kubernetes.pod.name=$pod"
	is "$output" "" "containers created for $pod"
	kube_do delete deployment refused --wait
	run_cmd k8s_ctr images rm "$other"
}
