#!/usr/bin/env bats
# Provisioning a kubelet node (ansible/roles/kubelet, off unless
# rekindle_kubelet): the playbook, on this machine and into a private root,
# writes the kubelet's configuration, bootstrap kubeconfig and unit for an
# existing cluster (no cluster here: the files are checked, not used), reads
# the CRI socket and cgroup driver from containerd's merged configuration, a
# kubeadm node's included, and refuses a kubelet node without a restore
# policy. The kubelet program is a stand-in script.

load helpers

ANSIBLE_DIR=$REKINDLE_ROOT/ansible

setup_file() {
	need_built containerd
	export KT=$BATS_FILE_TMPDIR/kt
	export KT_ROOT=$KT/root KT_PREFIX=$KT/root/opt/rekindle
	mkdir -p "$KT/controller"
	# The cluster's CA, as a control-plane node would hand it over.
	openssl req -x509 -newkey ed25519 -nodes -keyout "$KT/controller/ca.key" -out "$KT/controller/ca.crt" \
		-subj /CN=kubernetes -days 1 2>/dev/null || die "openssl cannot make a CA"
	printf '#!/bin/sh\necho "Kubernetes v1.34.0 (a stand-in)"\n' >"$KT/controller/kubelet"
	chmod +x "$KT/controller/kubelet"
	# A GPU node's inventory; the GPU facts given, as nvidia-smi is not here.
	cat >"$KT/vars.yml" <<EOF
rekindle_root: $KT_ROOT
rekindle_prefix: $KT_PREFIX
rekindle_kubelet: true
rekindle_cpu_only: false
kubelet_api_server: https://10.0.0.1:6443
kubelet_ca_file: $KT/controller/ca.crt
kubelet_bootstrap_token: abcdef.0123456789abcdef
kubelet_cluster_dns: [10.96.0.10]
kubelet_node_name: gpu-node-1
kubelet_node_labels: {example.com/pool: h100}
kubelet_taints: ["nvidia.com/gpu=present:NoSchedule"]
kubelet_gpu_model: NVIDIA H100 80GB HBM3
kubelet_driver_version: 580.95.05
kubelet_binary_src: $KT/controller/kubelet
kubelet_containerd: $BIN/containerd
containerd_restore_images: [registry.example.internal/inference]
EOF
}

# playbook [STATUS] ARGS...: ansible-playbook site.yml with the kubelet
# node's inventory, for the containerd, systemd and kubelet roles.
playbook() {
	local expect=0
	case "$1" in [0-9]* | '?') expect=$1; shift ;; esac
	cd "$ANSIBLE_DIR"
	ANSIBLE_NOCOLOR=1 ANSIBLE_FORCE_COLOR=0 run_cmd "$expect" \
		ansible-playbook -i inventory/local.yml site.yml -e "@$KT/vars.yml" "$@"
}

recap() {
	grep -E '^localhost +:' <<<"$output" | tail -1 | grep -oE "$1=[0-9]+" | cut -d= -f2
}

# flat: the last run's output on one line (Ansible's YAML callback wraps
# long messages and doubles their single quotes).
flat() {
	tr -s ' \n' ' ' <<<"$output" | sed "s/''/'/g"
}

tree_sums() {
	(cd "$1" && find . -type f -exec sha256sum {} + | sort -k2)
}

# yq FILE FILTER: jq's FILTER over the YAML file FILE (ansible's python reads it).
yq() {
	local py
	py=$(sed -n '1s/^#! *//p' "$(command -v ansible-playbook)")
	"$py" -c 'import json, sys, yaml; print(json.dumps(yaml.safe_load(open(sys.argv[1]))))' "$1" | jq -c "$2"
}

@test "the playbook with the kubelet role passes --syntax-check" {
	playbook --syntax-check -e rekindle_kubelet=true
	is "$output" "~playbook: site.yml" "syntax check"
}

@test "off by default: no kubelet file is written" {
	local r=$KT/off
	playbook --tags containerd,systemd,kubelet -e "rekindle_root=$r" -e '{"rekindle_kubelet": false}'
	is "$(recap failed)" "0" "failed tasks"
	is "$output" "~TASK \[kubelet : Check the API server\] \*+[[:space:]]+skipping" "kubelet tasks skipped"
	[ ! -e "$r/etc/kubernetes" ] || die "the kubelet role wrote $r/etc/kubernetes while off"
	[ ! -e "$r/etc/systemd/system/kubelet.service" ] || die "kubelet.service written while off"
}

@test "check mode on a fresh box: the kubelet tasks run, nothing is written" {
	local r=$KT/check
	playbook --check --tags containerd,systemd,kubelet -e "rekindle_root=$r"
	is "$(recap failed)" "0" "failed tasks"
	is "$(flat)" "~check mode: no configuration at $r/etc/containerd/config.toml, so the inventory values" "says where the runtime's settings came from"
	is "$output" "~TASK \[kubelet : Write the KubeletConfiguration\] \*+[[:space:]]+changed" "configuration would be written"
	[ ! -e "$r" ] || die "check mode wrote under $r: $(find "$r" -type f)"
}

@test "a kubelet node in a private root: configuration, bootstrap kubeconfig, unit" {
	playbook --tags containerd,systemd,kubelet
	is "$(recap failed)" "0" "failed tasks"
	local k=$KT_ROOT/etc/kubernetes
	cmp "$KT/controller/kubelet" "$KT_PREFIX/bin/kubelet" || die "the kubelet program is not installed"
	cmp "$KT/controller/ca.crt" "$k/pki/ca.crt" || die "the cluster's CA is not installed"
	# What the kubelet reads from its configuration.
	is "$(yq "$k/kubelet-config.yaml" '[.apiVersion, .kind]')" '["kubelet.config.k8s.io/v1beta1","KubeletConfiguration"]' "kind"
	is "$(yq "$k/kubelet-config.yaml" '.containerRuntimeEndpoint')" '"unix:///run/containerd/containerd.sock"' \
		"CRI socket: the one Rekindle's config.toml serves"
	is "$(yq "$k/kubelet-config.yaml" '.cgroupDriver')" '"cgroupfs"' "cgroup driver: runc's (Rekindle's config.toml sets no SystemdCgroup)"
	is "$(yq "$k/kubelet-config.yaml" '.authentication')" \
		"{\"anonymous\":{\"enabled\":false},\"webhook\":{\"enabled\":true},\"x509\":{\"clientCAFile\":\"$k/pki/ca.crt\"}}" "authentication"
	is "$(yq "$k/kubelet-config.yaml" '[.authorization.mode, .rotateCertificates, .serverTLSBootstrap, .readOnlyPort, .failSwapOn]')" \
		'["Webhook",true,true,0,true]' "authorization, certificates, ports, swap"
	is "$(yq "$k/kubelet-config.yaml" '[.clusterDNS, .clusterDomain, .runtimeRequestTimeout]')" '[["10.96.0.10"],"cluster.local","10m"]' \
		"DNS and the CRI timeout (the restore timeout)"
	is "$(yq "$k/kubelet-config.yaml" '.registerWithTaints')" '[{"key":"nvidia.com/gpu","value":"present","effect":"NoSchedule"}]' "taints"
	# The bootstrap kubeconfig: the cluster, the CA, the token; the kubelet's only.
	is "$(yq "$k/bootstrap-kubelet.conf" '[.clusters[0].cluster.server, .clusters[0].cluster."certificate-authority", .users[0].user.token, .contexts[0].context]')" \
		"[\"https://10.0.0.1:6443\",\"$k/pki/ca.crt\",\"abcdef.0123456789abcdef\",{\"cluster\":\"cluster\",\"user\":\"kubelet-bootstrap\"}]" "bootstrap kubeconfig"
	is "$(stat -c %a "$k/bootstrap-kubelet.conf")" "600" "the token's file mode"
	! grep -q "0123456789abcdef" <<<"$output" || die "the playbook printed the token"
	# The unit: after and with containerd, the node's name and labels.
	local unit=$KT_ROOT/etc/systemd/system/kubelet.service
	grep -qx "After=containerd.service network-online.target" "$unit" || die "kubelet.service is not ordered after containerd"
	grep -qx "Requires=containerd.service" "$unit" || die "kubelet.service does not require containerd"
	grep -qx "ExecStart=$KT_PREFIX/bin/kubelet \\\\" "$unit" || die "kubelet.service does not run the installed kubelet"
	grep -qx "  --bootstrap-kubeconfig=$k/bootstrap-kubelet.conf \\\\" "$unit" || die "no bootstrap kubeconfig flag"
	grep -qx "  --hostname-override=gpu-node-1 \\\\" "$unit" || die "no node name"
	grep -qx "  --node-labels=rekindle.dev/gpu-model=NVIDIA-H100-80GB-HBM3,rekindle.dev/driver=580.95.05,example.com/pool=h100 \\\\" "$unit" ||
		die "labels: $(grep node-labels "$unit")"
	# Not a systemd host, or a staged install: the kubelet is not started.
	is "$output" "~TASK \[kubelet : Enable and start kubelet.service\] \*+[[:space:]]+skipping" "service left alone"
}

@test "a second run changes nothing" {
	[ -f "$KT_ROOT/etc/kubernetes/kubelet-config.yaml" ] || skip "the first run did not write the configuration"
	tree_sums "$KT_ROOT" >"$KT/after-first"
	playbook --tags containerd,systemd,kubelet
	is "$(recap changed)" "0" "changed tasks on a second run"
	is "$(tree_sums "$KT_ROOT")" "$(cat "$KT/after-first")" "files under the root"
}

@test "systemd-analyze verify accepts kubelet.service" {
	command -v systemd-analyze >/dev/null || skip "systemd-analyze is missing (Debian package systemd)"
	local d=$KT_ROOT/etc/systemd/system
	[ -f "$d/kubelet.service" ] || skip "the playbook did not install the unit"
	cd "$d"
	run_cmd systemd-analyze verify ./kubelet.service
	is "$output" "" "systemd-analyze findings"
	# A broken unit must show.
	cp -r "$d" "$BATS_TEST_TMPDIR/units"
	sed -i 's|^ExecStart=/|ExecStart=|' "$BATS_TEST_TMPDIR/units/kubelet.service"
	cd "$BATS_TEST_TMPDIR/units"
	run_cmd '?' systemd-analyze verify ./kubelet.service
	is "$output" "~kubelet.service.*(relative|absolute)" "a bad unit is reported"
}

@test "on a kubeadm node's configuration: its socket and systemd cgroups, and a driver that differs refused" {
	local r=$KT/kubeadm etc=$KT/kubeadm/etc
	mkdir -p "$etc/containerd"
	cat >"$etc/containerd/config.toml" <<EOF
version = 3
[grpc]
  address = "/run/k8s-containerd/containerd.sock"
[plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc.options]
  SystemdCgroup = true
EOF
	playbook --tags containerd,kubelet -e "rekindle_root=$r"
	is "$(yq "$etc/kubernetes/kubelet-config.yaml" '[.containerRuntimeEndpoint, .cgroupDriver]')" \
		'["unix:///run/k8s-containerd/containerd.sock","systemd"]' "the node's socket and cgroup driver"
	tree_sums "$r" >"$KT/kubeadm-before"
	playbook 2 --tags kubelet -e "rekindle_root=$r" -e kubelet_cgroup_driver=cgroupfs
	is "$(flat)" "~SystemdCgroup = true \(cgroup driver systemd\), but kubelet_cri_socket is '' and kubelet_cgroup_driver 'cgroupfs': a kubelet must use the runtime's" \
		"names both drivers and the variable"
	is "$(tree_sums "$r")" "$(cat "$KT/kubeadm-before")" "files after the refusal"
}

@test "a kubelet node without a restore policy is refused, naming the variable, and nothing is written" {
	local r=$KT/nopolicy
	playbook 2 --tags containerd,kubelet -e "rekindle_root=$r" -e '{"containerd_restore_images": []}'
	is "$(flat)" "~This kubelet node would restore no checkpoint image: containerd_restore_images is empty" "names the variable"
	is "$(flat)" "~or set kubelet_require_restore_policy=false" "names the way out"
	[ ! -e "$r/etc/kubernetes" ] || die "the refused run wrote the kubelet's files"
}

@test "a containerd not yet running the inventory's policy is refused (--tags kubelet alone)" {
	[ -f "$KT_ROOT/etc/containerd/conf.d/rekindle.toml" ] || skip "the first run did not write the drop-in"
	tree_sums "$KT_ROOT" >"$KT/policy-before"
	playbook 2 --tags kubelet -e '{"containerd_restore_images": ["registry.example.internal/other"]}'
	is "$(flat)" "~restores \['registry.example.internal/inference'\] with restore via create true, but the inventory says \['registry.example.internal/other'\]" \
		"names both policies"
	is "$(flat)" "~run the containerd role with it \(--tags containerd,kubelet\)" "says how to fix it"
	is "$(tree_sums "$KT_ROOT")" "$(cat "$KT/policy-before")" "files after the refusal"
	# In check mode the containerd role's new drop-in is not on disk yet: said, not refused.
	playbook --check --tags containerd,kubelet -e '{"containerd_restore_images": ["registry.example.internal/other"]}'
	is "$(flat)" "~check mode: containerd's configuration restores \['registry.example.internal/inference'\] now; the containerd role would make it \['registry.example.internal/other'\]" \
		"check mode shows the change"
	is "$(tree_sums "$KT_ROOT")" "$(cat "$KT/policy-before")" "files after check mode"
}

@test "bad input is refused before anything is written: no API server, no CA, a bad token" {
	local r=$KT/bad
	playbook 2 --tags kubelet -e "rekindle_root=$r" -e kubelet_api_server=
	is "$(flat)" "~kubelet_api_server is '': set it to the cluster's API server" "no API server"
	playbook 2 --tags kubelet -e "rekindle_root=$r" -e kubelet_ca_file=
	is "$(flat)" "~Set one of kubelet_ca_file \(a PEM file on the controller\) or kubelet_ca_pem" "no CA"
	playbook 2 --tags kubelet -e "rekindle_root=$r" -e kubelet_bootstrap_token=secret
	is "$(flat)" "~got a token not of that form" "a bad token"
	[ ! -e "$r" ] || die "a refused run wrote under $r"
}
