#!/usr/bin/env bash
# kube-up.sh DIR: a single-node Kubernetes on the containerd that
# containerd-up.sh started on DIR: etcd, kube-apiserver, the controller
# manager, the scheduler and a kubelet whose CRI is that containerd, all from
# build/bin/kube (make kubernetes), with a CA and certificates made here.
# Everything lives under DIR/kube: state, logs, pid files, certificates, and
# DIR/kube/kubeconfig (cluster admin). kube-down.sh DIR stops it and removes
# what it left; containerd-down.sh DIR then stops containerd.
#
# The node is this host, named $KUBE_NODE (default rekindle-node). Pods get
# their addresses from a CNI bridge, rk-kHASH, in 10.244.N.0/24
# (KUBE_POD_CIDR overrides it), and their cgroups sit under the cgroupfs
# root /rk-kube-HASH, HASH and N taken from DIR so that clusters on other
# DIRs of one host do not meet.
# The kubelet serves on the host's address (the API server reaches it there
# for logs, exec and port-forward) and takes only clients whose certificate
# this CA signed.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
. "$here/lib.sh"
[ $# -eq 1 ] || die "usage: $0 DIR"
need_root
need_tool openssl jq python3
dir=$(realpath -m "$1")
bin=${REKINDLE_BIN:-$(dirname "$here")/build/bin}
kbin=$bin/kube
k=$dir/kube
node=${KUBE_NODE:-rekindle-node}
hash=$(printf %s "$dir" | sha256sum | cut -c1-6)
pod_cidr=${KUBE_POD_CIDR:-10.244.$((0x${hash:0:2})).0/24}
bridge=rk-k$hash
cgroot=/rk-kube-$hash
for t in etcd kube-apiserver kube-controller-manager kube-scheduler kubelet kubectl; do
	[ -x "$kbin/$t" ] || die "$kbin/$t is missing: run 'make kubernetes' first"
done
"$bin/ctr" --address "$dir/containerd.sock" version >/dev/null 2>&1 ||
	die "no containerd serves $dir/containerd.sock: start it with 'scripts/containerd-up.sh $dir' first"
for p in "$k"/*.pid; do
	[ -f "$p" ] && kill -0 "$(cat "$p")" 2>/dev/null &&
		die "a $(basename "$p" .pid) (pid $(cat "$p")) of an earlier run still serves $k: stop it with 'scripts/kube-down.sh $dir'"
done
rm -rf "$k"
mkdir -p "$k/pki" "$k/logs"
# What kube-down.sh removes besides DIR/kube; the node's address joins it below (the tests read it).
printf 'bridge=%s\ncgroot=%s\n' "$bridge" "$cgroot" >"$k/names"
# A cluster that did not come up is taken down again, whatever it had started.
up=
trap '[ -n "$up" ] || "$here/kube-down.sh" "$dir"' EXIT

# The node's address: the default route's source, else the first global
# one (a host whose traffic goes through a proxy may have no default route).
host_ip=$(ip -o route get 1.1.1.1 2>/dev/null | sed -n 's/.* src \([0-9.]*\).*/\1/p' || true)
[ -n "$host_ip" ] || host_ip=$(ip -o -4 addr show scope global 2>/dev/null | awk '{sub("/.*", "", $4); print $4; exit}' || true)
# Without iproute2 (a GPU host's image may lack it): the first local address
# in the kernel's table that is not loopback.
[ -n "$host_ip" ] || host_ip=$(awk '/\|-- /{a=$2} /\/32 host LOCAL/ && a !~ /^127\./ {print a; exit}' /proc/net/fib_trie 2>/dev/null)
[ -n "$host_ip" ] || die "this host has no IPv4 address but loopback: the kubelet needs a non-loopback node address (add one, e.g. on a dummy link)"
echo "node_ip=$host_ip" >>"$k/names"
read -r etcd_port etcd_peer api_port kubelet_port healthz_port cm_port sched_port < <("$here/free-ports.py" 7)
api=https://127.0.0.1:$api_port

# Certificates: one CA signs every server and client certificate.
pki=$k/pki
cert() { # cert NAME SUBJECT [SANS]
	local name=$1 subj=$2 sans=${3:-}
	openssl req -new -newkey rsa:2048 -nodes -keyout "$pki/$name.key" -subj "$subj" \
		-out "$pki/$name.csr" 2>/dev/null
	{
		echo "basicConstraints=CA:FALSE"
		echo "keyUsage=critical,digitalSignature,keyEncipherment"
		if [ -n "$sans" ]; then echo "extendedKeyUsage=serverAuth,clientAuth"; echo "subjectAltName=$sans"
		else echo "extendedKeyUsage=clientAuth"; fi
	} >"$pki/$name.ext"
	openssl x509 -req -in "$pki/$name.csr" -CA "$pki/ca.crt" -CAkey "$pki/ca.key" -CAcreateserial \
		-days 7 -sha256 -extfile "$pki/$name.ext" -out "$pki/$name.crt" 2>/dev/null
	rm -f "$pki/$name.csr" "$pki/$name.ext"
}
openssl req -x509 -new -newkey rsa:2048 -nodes -keyout "$pki/ca.key" -subj "/CN=rekindle-kube-ca" \
	-days 7 -out "$pki/ca.crt" 2>/dev/null
cert apiserver "/CN=kube-apiserver" \
	"IP:127.0.0.1,IP:10.96.0.1,DNS:localhost,DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc"
cert apiserver-kubelet-client "/O=system:masters/CN=kube-apiserver-kubelet-client"
cert admin "/O=system:masters/CN=rekindle-admin"
cert controller-manager "/CN=system:kube-controller-manager"
cert scheduler "/CN=system:kube-scheduler"
cert node "/O=system:nodes/CN=system:node:$node"
cert kubelet-serving "/CN=$node" "IP:$host_ip,IP:127.0.0.1,DNS:$node"
openssl genrsa -out "$pki/sa.key" 2048 2>/dev/null
openssl rsa -in "$pki/sa.key" -pubout -out "$pki/sa.pub" 2>/dev/null

kubeconfig() { # kubeconfig FILE CERT
	local c=$2 kc=("$kbin/kubectl" --kubeconfig "$1")
	"${kc[@]}" config set-cluster local --server="$api" --certificate-authority="$pki/ca.crt" --embed-certs >/dev/null
	"${kc[@]}" config set-credentials user --client-certificate="$pki/$c.crt" --client-key="$pki/$c.key" --embed-certs >/dev/null
	"${kc[@]}" config set-context local --cluster=local --user=user >/dev/null
	"${kc[@]}" config use-context local >/dev/null
}
kubeconfig "$k/kubeconfig" admin
kubeconfig "$k/controller-manager.kubeconfig" controller-manager
kubeconfig "$k/scheduler.kubeconfig" scheduler
kubeconfig "$k/kubelet.kubeconfig" node

# start NAME ARGS...: run a component in its own session, logging to
# DIR/kube/logs/NAME.log.
start() {
	local name=$1
	shift
	setsid "$@" >>"$k/logs/$name.log" 2>&1 </dev/null &
	echo $! >"$k/$name.pid"
}
# wait_until WHAT SECONDS CMD...: poll CMD until it succeeds.
wait_until() {
	local what=$1 n=$(($2 * 5)) name=$3
	shift 3
	for _ in $(seq "$n"); do
		"$@" >/dev/null 2>&1 && return 0
		[ -z "$name" ] || kill -0 "$(cat "$k/$name.pid")" 2>/dev/null || break
		sleep 0.2
	done
	[ -z "$name" ] || tail -5 "$k/logs/$name.log" >&2
	die "$what did not come up; see $k/logs/${name:-kubelet}.log"
}
kubectl() { "$kbin/kubectl" --kubeconfig "$k/kubeconfig" "$@"; }

# etcd is this cluster's store only: no fsync, as a test cluster is thrown away.
start etcd "$kbin/etcd" --name default --data-dir "$k/etcd" --unsafe-no-fsync \
	--listen-client-urls "http://127.0.0.1:$etcd_port" --advertise-client-urls "http://127.0.0.1:$etcd_port" \
	--listen-peer-urls "http://127.0.0.1:$etcd_peer" --initial-advertise-peer-urls "http://127.0.0.1:$etcd_peer" \
	--initial-cluster "default=http://127.0.0.1:$etcd_peer" --listen-metrics-urls ""
start kube-apiserver "$kbin/kube-apiserver" --etcd-servers "http://127.0.0.1:$etcd_port" \
	--bind-address 127.0.0.1 --advertise-address "$host_ip" --secure-port "$api_port" \
	--tls-cert-file "$pki/apiserver.crt" --tls-private-key-file "$pki/apiserver.key" \
	--client-ca-file "$pki/ca.crt" --authorization-mode Node,RBAC --enable-admission-plugins NodeRestriction \
	--service-account-issuer https://kubernetes.default.svc --service-account-key-file "$pki/sa.pub" \
	--service-account-signing-key-file "$pki/sa.key" --service-cluster-ip-range 10.96.0.0/24 \
	--kubelet-client-certificate "$pki/apiserver-kubelet-client.crt" \
	--kubelet-client-key "$pki/apiserver-kubelet-client.key" --kubelet-certificate-authority "$pki/ca.crt" \
	--kubelet-preferred-address-types InternalIP \
	--allow-privileged --profiling=false --cert-dir "$k/apiserver-certs"
wait_until "kube-apiserver on $api" 90 kube-apiserver kubectl get --raw /readyz
start kube-controller-manager "$kbin/kube-controller-manager" --kubeconfig "$k/controller-manager.kubeconfig" \
	--authentication-kubeconfig "$k/controller-manager.kubeconfig" \
	--authorization-kubeconfig "$k/controller-manager.kubeconfig" \
	--bind-address 127.0.0.1 --secure-port "$cm_port" --leader-elect=false --use-service-account-credentials \
	--service-account-private-key-file "$pki/sa.key" --root-ca-file "$pki/ca.crt" \
	--controllers '*,-nodeipam,-cloud-node-lifecycle,-service-lb-controller,-route' --profiling=false \
	--cert-dir "$k/controller-manager-certs"
start kube-scheduler "$kbin/kube-scheduler" --kubeconfig "$k/scheduler.kubeconfig" \
	--authentication-kubeconfig "$k/scheduler.kubeconfig" --authorization-kubeconfig "$k/scheduler.kubeconfig" \
	--bind-address 127.0.0.1 --secure-port "$sched_port" --leader-elect=false --profiling=false \
	--cert-dir "$k/scheduler-certs"

# The pod network: a bridge with addresses from host-local, read by
# containerd's CRI from its conf_dir (containerd-config.sh).
cat >"$dir/cni/net.d/10-rekindle-kube.conflist" <<EOF
{"cniVersion": "1.0.0", "name": "rekindle-kube", "plugins": [
  {"type": "bridge", "bridge": "$bridge", "isGateway": true, "ipMasq": true, "hairpinMode": true,
   "ipam": {"type": "host-local", "ranges": [[{"subnet": "$pod_cidr"}]], "routes": [{"dst": "0.0.0.0/0"}],
            "dataDir": "$k/cni-ipam"}},
  {"type": "portmap", "capabilities": {"portMappings": true}}]}
EOF

# Pod cgroups under their own cgroupfs root, in every v1 hierarchy the
# kubelet uses (and the unified one on a hybrid host); on a host with the
# unified hierarchy alone (the GPU hosts), in it, with the controllers the
# kubelet requires of that root given to it by the root's subtree.
if [ -f /sys/fs/cgroup/cgroup.controllers ]; then
	mkdir -p "/sys/fs/cgroup$cgroot"
	for c in cpuset cpu io memory hugetlb pids; do
		grep -qw "$c" /sys/fs/cgroup/cgroup.controllers || continue
		echo "+$c" >/sys/fs/cgroup/cgroup.subtree_control ||
			die "cannot enable the $c controller in /sys/fs/cgroup/cgroup.subtree_control, which the kubelet needs for its pods"
	done
else
	for c in /sys/fs/cgroup/*/; do
		mkdir -p "$c${cgroot#/}"
		if [ -f "${c}cpuset.cpus" ]; then
			cat "${c}cpuset.cpus" >"$c${cgroot#/}/cpuset.cpus"
			cat "${c}cpuset.mems" >"$c${cgroot#/}/cpuset.mems"
		fi
	done
fi

cat >"$k/kubelet.yaml" <<EOF
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
containerRuntimeEndpoint: unix://$dir/containerd.sock
cgroupDriver: cgroupfs
cgroupRoot: $cgroot
# This VM's hybrid cgroup hierarchy; the kubelet refuses cgroup v1 by default since 1.35.
failCgroupV1: false
failSwapOn: false
address: 0.0.0.0
port: $kubelet_port
readOnlyPort: 0
healthzBindAddress: 127.0.0.1
healthzPort: $healthz_port
tlsCertFile: $pki/kubelet-serving.crt
tlsPrivateKeyFile: $pki/kubelet-serving.key
authentication:
  anonymous: {enabled: false}
  webhook: {enabled: false}
  x509: {clientCAFile: $pki/ca.crt}
# Only clients with a certificate from this cluster's CA reach the kubelet
# (the API server, the admin); a real node asks the API server (Webhook).
authorization: {mode: AlwaysAllow}
podLogsDir: $k/pod-logs
volumePluginDir: $k/volume-plugins
# No eviction or image collection on a test host's disk and memory: a
# collected image would be a test's checkpoint image.
evictionHard: {memory.available: "1Mi", nodefs.available: "1%", imagefs.available: "1%", nodefs.inodesFree: "1%"}
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
serializeImagePulls: false
# A restore answers StartContainer only once CRIU is done; the default 2 min
# would cancel a large one.
runtimeRequestTimeout: 10m
registerNode: true
EOF
# The kubelet sets these kernel tunables to its own values at start
# (protectKernelDefaults would refuse to start instead); kube-down.sh puts
# back what this host had.
for t in vm/overcommit_memory vm/panic_on_oom kernel/panic kernel/panic_on_oops \
	kernel/keys/root_maxkeys kernel/keys/root_maxbytes; do
	echo "$t $(cat "/proc/sys/$t")"
done >"$k/sysctls"
start kubelet "$kbin/kubelet" --config "$k/kubelet.yaml" --kubeconfig "$k/kubelet.kubeconfig" \
	--root-dir "$k/kubelet" --cert-dir "$k/kubelet-certs" --hostname-override "$node" --node-ip "$host_ip"
ready() { [ "$(kubectl get node "$node" -o jsonpath='{.status.conditions[?(@.type=="Ready")].status}')" = True ]; }
wait_until "node $node (Ready)" 120 kubelet ready
# No pod waits for a default service account that the controller has not made yet.
wait_until "the default service account" 60 kube-controller-manager kubectl get serviceaccount default
up=1
note "Kubernetes $("$kbin/kubelet" --version | awk '{print $2}') up: node $node, API $api (kubeconfig: $k/kubeconfig)"
