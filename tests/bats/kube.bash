# Kubernetes helpers for the bats files that run a real kubelet on the
# file's containerd (scripts/kube-up.sh): the cluster up and down, kubectl
# as its admin, Deployments of the engine and what a pod left on the node.
# Load after helpers and cri.

KBIN=$BIN/kube

# need_kube: skip the file unless make kubernetes built the cluster.
need_kube() {
	local t
	for t in etcd kube-apiserver kube-controller-manager kube-scheduler kubelet kubectl; do
		[ -x "$KBIN/$t" ] || skip "$KBIN/$t is not built (run 'make kubernetes')"
	done
}

# kube_up: the file's cluster on its containerd (after cri_up).
kube_up() {
	"$REKINDLE_ROOT/scripts/kube-up.sh" "$RK_DIR" 3>&-
	export KUBECONFIG=$RK_DIR/kube/kubeconfig
}

# kube_down: stop it and remove what it left (before stack_down).
kube_down() {
	[ -n "${RK_DIR:-}" ] || return 0
	"$REKINDLE_ROOT/scripts/kube-down.sh" "$RK_DIR" 3>&-
}

kubectl() {
	"$KBIN/kubectl" --kubeconfig "$RK_DIR/kube/kubeconfig" "$@"
}

# kube_exec POD CMD...: run CMD in POD's first container.
kube_exec() {
	kubectl exec "$1" -- "${@:2}"
}

# kube_do ARGS...: run kubectl, print it and its output, fail on an error.
kube_do() {
	run_cmd kubectl "$@"
}

# deployment NAME IMAGE REPLICAS [PULL_POLICY]: apply a Deployment of the
# engine from IMAGE, listening on 0.0.0.0:30000 in its pod's network, ready
# when /health answers.
deployment() {
	local name=$1 image=$2 replicas=$3 pull=${4:-IfNotPresent}
	kubectl apply -f - >&2 <<-EOF
		apiVersion: apps/v1
		kind: Deployment
		metadata: {name: $name}
		spec:
		  replicas: $replicas
		  selector: {matchLabels: {app: $name}}
		  template:
		    metadata: {labels: {app: $name}}
		    spec:
		      automountServiceAccountToken: false
		      terminationGracePeriodSeconds: 2
		      containers:
		      - name: engine
		        image: $image
		        imagePullPolicy: $pull
		        env: [{name: ENGINE_PORT, value: "30000"}, {name: ENGINE_HOST, value: 0.0.0.0}]
		        readinessProbe:
		          httpGet: {path: /health, port: 30000}
		          periodSeconds: 1
		          failureThreshold: 1
	EOF
}

# ready_replicas NAME N: the Deployment NAME has N ready replicas, all of the latest template.
ready_replicas() {
	local s
	s=$(kubectl get deployment "$1" -o json) || return 1
	[ "$(jq -r '.status.readyReplicas // 0' <<<"$s")" = "$2" ] &&
		[ "$(jq -r '.status.updatedReplicas // 0' <<<"$s")" = "$2" ] &&
		[ "$(jq -r '.status.replicas // 0' <<<"$s")" = "$2" ]
}

# pods_of NAME: the names of the Deployment NAME's pods.
pods_of() {
	kubectl get pods -l "app=$1" -o jsonpath='{range .items[*]}{.metadata.name}{"\n"}{end}'
}

# has_pods NAME: the Deployment NAME has a pod.
has_pods() {
	[ -n "$(pods_of "$1")" ]
}

# no_pods NAME: the Deployment NAME has no pods left, not even terminating.
no_pods() {
	[ -z "$(pods_of "$1")" ]
}

# pod_ip POD, container_id POD: the pod's address, its engine container's CRI ID.
pod_ip() {
	kubectl get pod "$1" -o jsonpath='{.status.podIP}'
}
container_id() {
	kubectl get pod "$1" -o jsonpath='{.status.containerStatuses[0].containerID}' | sed 's|^containerd://||'
}

# at POD METHOD PATH [JSON]: one HTTP call to the engine of POD, on its pod address.
at() {
	local ip body=${4:-}
	ip=$(pod_ip "$1") && [ -n "$ip" ] || return 1
	curl -fsS --max-time 10 -X "$2" ${body:+-H 'Content-Type: application/json' -d "$body"} "http://$ip:30000$3"
}

# events_of POD: the messages of the pod's events, one per line.
events_of() {
	kubectl get events --field-selector "involvedObject.name=$1" -o jsonpath='{range .items[*]}{.reason}: {.message}{"\n"}{end}'
}

# wait_event POD PATTERN SECONDS: wait until an event of POD matches the
# extended regex PATTERN; on a timeout the failure lists the pod's events.
wait_event() {
	local i
	for ((i = 0; i < $3 * 2; i++)); do
		events_of "$1" | grep -Eq -- "$2" && { events_of "$1" | grep -E -- "$2" | head -1 >&2; return 0; }
		sleep 0.5
	done
	events_of "$1" | sed 's/^/#   /' >&2
	die "timed out after $3s waiting for an event of $1 matching: $2"
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
	restored_by_containerd "$id"
}

# restored_by_containerd ID: containerd restored container ID (not started
# it) and logged the phase times; any engine's pod.
restored_by_containerd() {
	logged "Restored container $1 successfully"
	logged "restored from checkpoint image .*criu-restore=[0-9.]*s"
}

# kube_node_ip: the address the node registered with (kube-up.sh's choice).
kube_node_ip() {
	sed -n 's/^node_ip=//p' "$RK_DIR/kube/names"
}
