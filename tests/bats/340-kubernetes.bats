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

@test "kubelet: oci-checkpoint checkpoints a Deployment's pod by namespace, pod and container name" {
	deployment src "$ENGINE_IMAGE" 1 Never
	wait_for "Deployment src ready" 120 ready_replicas src 1
	local pod
	pod=$(pods_of src)
	record_pod "$pod"

	# Two images for a node that cannot restore them (the CPU flags they
	# record name avx9000, which no CPU has), with and without a cold
	# fallback; the engine runs on after each (--leave-running).
	local f tar=$BATS_FILE_TMPDIR/ckpt.tar
	for f in cold none; do
		run_cmd "$BIN/oci-checkpoint" -n k8s.io create --port 30000 --leave-running --fallback "$f" \
			--output "oci-archive:$tar" "default/$pod/engine" "rekindle.local/engine:avx9000-$f"
		needs_avx9000 "$tar" "$tar.new" "rekindle.local/engine:avx9000-$f"
		run_cmd k8s_ctr images import "$tar.new"
		rm -f "$tar" "$tar.new"
	done
	# One under a name the node's policy does not list, its only name, and
	# one whose layer the damage test overwrites.
	local name
	for name in rekindle.other/engine:ckpt rekindle.local/engine:damaged; do
		run_cmd "$BIN/oci-checkpoint" -n k8s.io create --port 30000 --leave-running \
			--output "oci-archive:$tar" "default/$pod/engine" "$name"
		run_cmd k8s_ctr images import "$tar"
		[ "$name" = rekindle.local/engine:damaged ] || rm -f "$tar"
	done
	# The last archive is the damaged one's.
	oci_python -c 'import sys, oci_tar
index, a = oci_tar.read(sys.argv[1])
print(a.get_json(index["manifests"][0]["digest"])["layers"][0]["digest"])' "$tar" >"$BATS_FILE_TMPDIR/damaged.layer"
	rm -f "$tar"
	run_cmd "$BIN/oci-checkpoint" -n k8s.io create --port 30000 "default/$pod/engine" "$CKPT"
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
	weights_intact - "$pod" kube_exec <<<"$state"
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
	# The kubelet removes a gone pod's containers and sandbox in its
	# garbage collection, once a minute.
	no_cri() { [ -z "$(cri ps -a -q)" ] && [ -z "$(cri pods -q)" ]; }
	wait_for "the kubelet to remove the pods' containers and sandboxes" 120 no_cri
	local left cgroot
	cgroot=$(sed -n 's/^cgroot=//p' "$RK_DIR/kube/names")
	left=$(grep -l ":$cgroot/kubepods" /proc/[0-9]*/cgroup 2>/dev/null) || true
	[ -z "$left" ] || die "processes left in pod cgroups: $left"
	# Addresses: host-local keeps one file per allocated address.
	run ls "$RK_DIR/kube/cni-ipam/rekindle-kube"
	[[ $output != *10.244.* ]] || die "pod addresses still allocated: $output"
	# Pod cgroups: only the QoS levels kubelet keeps.
	left=$(find "/sys/fs/cgroup/memory$cgroot" -mindepth 1 -type d -name 'pod*')
	[ -z "$left" ] || die "pod cgroups left: $left"
	left=$(awk -v d="$RK_DIR/kube/kubelet/pods/" 'index($5, d) == 1 {print $5}' /proc/self/mountinfo)
	[ -z "$left" ] || die "pod volume mounts left: $left"
	run_cmd k8s_ctr snapshots ls
	[[ $output != *checkpoint-restore/* ]] || die "a restore's snapshot is left: $output"
	kube_do delete deployment engine
}

@test "kubelet: a checkpoint image the node's policy refuses never runs; the pod's events name the policy" {
	load_recorded
	local other=rekindle.other/engine:ckpt
	deployment refused "$other" 1 Never
	local pod
	wait_for "a pod of refused" 60 has_pods refused
	pod=$(pods_of refused)
	wait_event "$pod" "may not be restored on this host: .*checkpoint_restore_images" 90
	run_cmd cri ps -a -q --label "io.kubernetes.pod.name=$pod"
	is "$output" "" "containers created for $pod"
	kube_do delete deployment refused --wait
}

@test "kubelet: an image this node cannot restore, made with --fallback cold, starts cold in its pod; its log begins with why" {
	load_recorded
	local image=rekindle.local/engine:avx9000-cold pod id info
	deployment cold "$image" 1 Never
	wait_for "Deployment cold ready" 120 ready_replicas cold 1
	pod=$(pods_of cold)
	id=$(container_id "$pod")
	[ "$(at "$pod" GET /state | jq -r .start_time)" != "$E_START" ] || die "the engine was restored, not started cold"
	is "$(at "$pod" POST /generate "$PROMPT" | jq -r .text)" "$E_TEXT" "the cold engine's greedy output"
	info=$(cri inspect "$id")
	is "$(jq -r .status.annotations.restored <<<"$info")" false "restored annotation"
	is "$(jq -r .status.annotations.restoreFallback <<<"$info")" cold "restoreFallback annotation"
	# The pod's events cannot say so (CRI cannot post one); its log does, first.
	kube_do logs "$pod"
	[[ ${lines[0]} == "rekindle: checkpoint image $image was not restored (this host's CPU lacks avx9000"*"); the container started cold from its base image (fallback cold)" ]] ||
		die "the log does not begin with the cold start notice: ${lines[0]}"
	# The kubelet names the image by its ID.
	logged "restoring checkpoint image sha256:[0-9a-f]* failed preflight: this host's CPU lacks avx9000.*; starting cold from base image $ENGINE_IMAGE (fallback cold)"
	kube_do delete deployment cold --wait
}

@test "kubelet: an image this node cannot restore, made without a fallback, never runs; the pod's events give the reason" {
	load_recorded
	local pod
	deployment nocold rekindle.local/engine:avx9000-none 1 Never
	wait_for "a pod of nocold" 60 has_pods nocold
	pod=$(pods_of nocold)
	wait_event "$pod" "cannot be restored on this host: this host's CPU lacks avx9000" 90
	run_cmd cri ps -a -q --label "io.kubernetes.pod.name=$pod"
	is "$output" "" "containers created for $pod"
	kube_do delete deployment nocold --wait
}

@test "kubelet: a pod that grants less than the checkpoint had (capabilities dropped) is refused, the event names what" {
	load_recorded
	local pod
	deployment caps "$CKPT" 1
	kubectl patch deployment caps --type json -p \
		'[{"op": "add", "path": "/spec/template/spec/containers/0/securityContext", "value": {"capabilities": {"drop": ["ALL"]}}}]' >&2
	wait_for "a pod of caps" 60 has_pods caps
	capped() {
		pod=$(kubectl get pods -l app=caps -o json |
			jq -r '.items[] | select(.spec.containers[0].securityContext.capabilities.drop == ["ALL"]) | .metadata.name' | head -1)
		[ -n "$pod" ] && events_of "$pod" | grep -q "refusing to restore: .*cap_prm has CAP_CHOWN"
	}
	wait_for "an event of the capped pod naming the capability" 90 capped
	events_of "$pod" | grep CAP_CHOWN | head -1 >&2
	[ "$(kubectl get pod "$pod" -o jsonpath='{.status.containerStatuses[0].ready}')" != true ] || die "the refused pod is ready"
	kube_do delete deployment caps --wait
}

@test "kubelet: a checkpoint layer damaged on the node never runs; the pod's events name the blob and the fix, nothing is created" {
	load_recorded
	local layer blob size pod
	layer=$(cat "$BATS_FILE_TMPDIR/damaged.layer")
	blob=$RK_DIR/root/io.containerd.content.v1.content/blobs/sha256/${layer#sha256:}
	[ -f "$blob" ] || die "no blob $blob"
	size=$(stat -c %s "$blob")
	# As a bad disk would: the same size, 4 MiB in the middle overwritten.
	dd if=/dev/urandom of="$blob" bs=1M seek=$((size / 2 / 1048576)) count=4 conv=notrunc status=none
	deployment damaged rekindle.local/engine:damaged 1 Never
	wait_for "a pod of damaged" 60 has_pods damaged
	pod=$(pods_of damaged)
	wait_event "$pod" "checkpoint layer $layer .* does not match its digest.*nerdctl rmi" 90
	run_cmd cri ps -a -q --label "io.kubernetes.pod.name=$pod"
	is "$output" "" "containers created for $pod"
	kube_do delete deployment damaged --wait
}

@test "kubelet: an unsigned checkpoint image on a node that requires signatures never runs; the pod's events name the option" {
	load_recorded
	command -v openssl >/dev/null || skip "openssl is not installed"
	local keys=$BATS_FILE_TMPDIR/keys pod
	mkdir -p "$keys"
	openssl genpkey -algorithm ed25519 -out "$keys/team.key" 2>/dev/null
	openssl pkey -in "$keys/team.key" -pubout -out "$keys/team.pub"
	# containerd restarts with the stricter policy; the kubelet reconnects.
	CONTAINERD_RESTORE_KEYS="[\"$keys/team.pub\"]" CONTAINERD_RESTORE_REQUIRE_SIGNATURE=true \
		HTTPS_PROXY=$OFFLINE_PROXY HTTP_PROXY=$OFFLINE_PROXY NO_PROXY= stack_restart
	node_ready() { [ "$(kubectl get node rekindle-node -o jsonpath='{.status.conditions[?(@.type=="Ready")].status}')" = True ]; }
	wait_for "the node to be ready again" 120 node_ready
	deployment unsigned "$CKPT" 1
	wait_for "a pod of unsigned" 60 has_pods unsigned
	pod=$(pods_of unsigned)
	wait_event "$pod" "may not be restored on this host: .*checkpoint_restore_require_signature in .* is true" 120
	run_cmd cri ps -a -q --label "io.kubernetes.pod.name=$pod"
	is "$output" "" "containers created for $pod"
	kube_do delete deployment unsigned --wait
	HTTPS_PROXY=$OFFLINE_PROXY HTTP_PROXY=$OFFLINE_PROXY NO_PROXY= stack_restart
	wait_for "the node to be ready again" 120 node_ready
}

# gated NAME IMAGE: a Deployment of IMAGE whose init container runs the
# node's own oci-checkpoint check on it, in the node's root (docs/kubernetes.md,
# "oci-checkpoint check as an init gate").
gated() {
	kubectl apply -f - >&2 <<-EOF
		apiVersion: apps/v1
		kind: Deployment
		metadata: {name: $1}
		spec:
		  replicas: 1
		  selector: {matchLabels: {app: $1}}
		  template:
		    metadata: {labels: {app: $1}}
		    spec:
		      automountServiceAccountToken: false
		      terminationGracePeriodSeconds: 2
		      initContainers:
		      - name: can-restore
		        image: $ENGINE_IMAGE
		        imagePullPolicy: Never
		        command: [chroot, /host, $BIN/oci-checkpoint, --address, $RK_DIR/containerd.sock, -n, k8s.io,
		                  check, --containerd-config, $RK_DIR/config.toml, "$2"]
		        securityContext: {privileged: true}
		        volumeMounts: [{name: host, mountPath: /host}]
		      volumes: [{name: host, hostPath: {path: /}}]
		      containers:
		      - name: engine
		        image: $2
		        imagePullPolicy: IfNotPresent
		        env: [{name: ENGINE_PORT, value: "30000"}, {name: ENGINE_HOST, value: 0.0.0.0}]
		        readinessProbe: {httpGet: {path: /health, port: 30000}, periodSeconds: 1, failureThreshold: 1}
	EOF
}

@test "kubelet: oci-checkpoint check as an init container keeps a pod this node cannot restore from starting, and lets a restorable one restore" {
	load_recorded
	local pod
	gated gate-no rekindle.local/engine:avx9000-none
	wait_for "a pod of gate-no" 60 has_pods gate-no
	pod=$(pods_of gate-no)
	init_failed() {
		kubectl get pod "$pod" -o json |
			jq -e '.status.initContainerStatuses[0] | (.lastState.terminated.exitCode // .state.terminated.exitCode) == 1' >/dev/null
	}
	wait_for "the init gate of $pod to fail" 120 init_failed
	# The kubelet may have started the gate again since: its log is then
	# the earlier run's.
	kube_do logs "$pod" -c can-restore
	[[ $output == *"avx9000"* ]] || run_cmd '?' kubectl logs --previous "$pod" -c can-restore
	[[ $output == *"avx9000"* ]] || die "the gate's log does not give the reason"
	run_cmd cri ps -a -q --label "io.kubernetes.pod.name=$pod" --label io.kubernetes.container.name=engine
	is "$output" "" "engine containers created for $pod"
	kube_do delete deployment gate-no --wait

	# The pod's network has its own loopback, where the test's registry is
	# not: the image is pulled first, and the gate finds it in the node's store.
	run_cmd "$REKINDLE_ROOT/scripts/nerdctl.sh" "$RK_DIR" -n k8s.io pull --insecure-registry "$CKPT"
	gated gate-yes "$CKPT"
	wait_for "Deployment gate-yes ready" 180 ready_replicas gate-yes 1
	pod=$(pods_of gate-yes)
	assert_restored "$pod"
	kube_do delete deployment gate-yes --wait
}
