#!/usr/bin/env bats
# The kubelet's own checkpoint API (KEP-2008): POST
# /checkpoint/NAMESPACE/POD/CONTAINER on the kubelet port has containerd's
# CRI write a checkpoint archive under the kubelet's root dir;
# oci-checkpoint import turns it into a checkpoint image, which a new
# Deployment restores. An archive it cannot trust is refused, by name.

load helpers
load cri
load kube

setup_file() {
	need_built crictl
	need_kube
	cri_up
	kube_up
	export CKPT=rekindle.local/ckpt:kubelet
	export SAVED=$BATS_FILE_TMPDIR/kubelet-checkpoint.tar
}

teardown_file() {
	kube_down
	# No registry: import stores the image in the node's image store.
	[ -n "${REGISTRY_DIR:-}" ] && registry_stop "$REGISTRY_DIR"
	stack_down
}

# kubelet_checkpoint NAMESPACE POD CONTAINER: the kubelet's checkpoint API,
# as the cluster's admin (a client certificate from the cluster's CA, which
# is all the kubelet asks); prints the archive's path it answers with.
kubelet_checkpoint() {
	local pki=$RK_DIR/kube/pki port node
	port=$(sed -n 's/^port: *//p' "$RK_DIR/kube/kubelet.yaml")
	node=$(kube_node_ip)
	[ -n "$port" ] && [ -n "$node" ] || die "no kubelet port or node address"
	echo "\$ curl -X POST https://$node:$port/checkpoint/$1/$2/$3" >&2
	curl -fsS --max-time 300 --cacert "$pki/ca.crt" --cert "$pki/admin.crt" --key "$pki/admin.key" \
		-X POST "https://$node:$port/checkpoint/$1/$2/$3" | tee /dev/stderr | jq -r '.items[0]'
}

# no_image NAME: the node's image store has no image NAME.
no_image() {
	! k8s_ctr images ls -q | grep -qxF "$1" || die "image $1 was written"
}

@test "kubelet checkpoint API: oci-checkpoint import makes an image that a new Deployment restores, answering as before" {
	deployment src "$ENGINE_IMAGE" 1 Never
	wait_for "Deployment src ready" 120 ready_replicas src 1
	local pod archive
	pod=$(pods_of src)
	record_pod "$pod"

	archive=$(kubelet_checkpoint default "$pod" engine)
	[ -f "$archive" ] || die "the kubelet named no archive ($archive)"
	is "$archive" "~^$RK_DIR/kube/kubelet/checkpoints/checkpoint-${pod}_default-engine-.*\.tar$" "archive under the kubelet's root dir"
	cp "$archive" "$SAVED"

	run_cmd "$BIN/oci-checkpoint" --address "$RK_DIR/containerd.sock" -n k8s.io import --port 30000 --json "$archive" "$CKPT"
	local res
	res=$(sed -n '/^{/,$p' <<<"$output")
	is "$(jq -r '.annotations["org.rekindle.checkpoint.source"]' <<<"$res")" "cri-archive" "marked as imported"
	is "$(jq -r '.annotations["org.rekindle.checkpoint.quiesced"]' <<<"$res")" "false" "marked as not quiesced"
	is "$(jq -r '.annotations["org.criu.checkpoint.pod.name"]' <<<"$res")" "$pod" "checkpointctl's pod annotation"
	is "$(jq -r '.base_digest' <<<"$res")" "$(k8s_ctr images ls | awk -v n="$ENGINE_IMAGE" '$1 == n {print $3}')" "base pinned by digest"
	run_cmd "$BIN/oci-checkpoint" --address "$RK_DIR/containerd.sock" -n k8s.io inspect "$CKPT"
	[[ $output == *"Made by:     import of a CRI checkpoint archive"* ]] || die "inspect does not say it was imported"
	[[ $output == *"This host:   can restore it"* ]] || die "inspect says this host cannot restore it"

	kube_do delete deployment src --wait
	wait_for "the pods of src to go" 60 no_pods src

	deployment dst "$CKPT" 1 Never
	wait_for "Deployment dst ready" 180 ready_replicas dst 1
	pod=$(pods_of dst)
	is "$(at "$pod" GET /state | jq -r .start_time)" "$E_START" "start time: restored, not restarted"
	is "$(at "$pod" GET /state | jq -r .pid)" "$E_PID" "engine pid"
	is "$(at "$pod" POST /generate "$PROMPT" | jq -r .text)" "$E_TEXT" "greedy output"
	logged "Restored container $(container_id "$pod") successfully"
	kube_do delete deployment dst --wait
	wait_for "the pods of dst to go" 60 no_pods dst
}

# import_refused ARCHIVE WHY [FLAGS...]: import refuses ARCHIVE, saying WHY
# (a regex), and writes no image.
import_refused() {
	run_cmd 1 "$BIN/oci-checkpoint" --address "$RK_DIR/containerd.sock" -n k8s.io import "${@:3}" "$1" rekindle.local/ckpt:refused
	[[ $output =~ $2 ]] || die "the refusal does not say: $2"
	no_image docker.io/rekindle.local/ckpt:refused
	no_image rekindle.local/ckpt:refused
}

@test "kubelet checkpoint API: import refuses a truncated archive, a path out of it, an OCI image, another base and a missing base by name, writing no image" {
	[ -f "$SAVED" ] || skip "the checkpoint test did not run"
	local t=$BATS_TEST_TMPDIR
	head -c $(($(stat -c %s "$SAVED") / 2)) "$SAVED" >"$t/truncated.tar"
	import_refused "$t/truncated.tar" "the archive is truncated"

	python3 - "$SAVED" "$t/escape.tar" <<-'PY'
		import io, sys, tarfile
		src, dst = sys.argv[1:3]
		with tarfile.open(src) as i, tarfile.open(dst, "w") as o:
		    for m in i.getmembers():
		        o.addfile(m, i.extractfile(m) if m.isfile() else None)
		    evil = tarfile.TarInfo("checkpoint/../../etc/cron.d/evil")
		    evil.size = 4
		    o.addfile(evil, io.BytesIO(b"boom"))
	PY
	import_refused "$t/escape.tar" "'\.\.' path that leads out of the archive"

	# A Rekindle image is no CRI checkpoint archive.
	run_cmd "$BIN/oci-checkpoint" --address "$RK_DIR/containerd.sock" -n k8s.io import \
		--output "oci-archive:$t/image.tar" "$SAVED" rekindle.local/ckpt:as-archive
	import_refused "$t/image.tar" "not a CRI checkpoint archive: it is an OCI image archive"

	# A --base-image of other content than the container ran on.
	import_refused "$SAVED" "but the checkpoint's container ran on" --base-image "$CKPT"

	# No base image: a namespace without it, named with the fix.
	run_cmd 1 "$BIN/oci-checkpoint" --address "$RK_DIR/containerd.sock" -n bare import "$SAVED" rekindle.local/ckpt:refused
	[[ $output == *"the base image $ENGINE_IMAGE ("*") is not in containerd's image store (namespace bare"* ]] ||
		die "the refusal does not name the missing base image"
	! "$BIN/ctr" --address "$RK_DIR/containerd.sock" -n bare images ls -q | grep -q . || die "an image was written in namespace bare"
}
