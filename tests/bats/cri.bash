# CRI helpers for the bats files that drive containerd's CRI with crictl, as a
# kubelet would: a private containerd started offline, crictl pointed at it,
# the CPU engine and a local sandbox ("pause") image in the k8s.io
# namespace, and pods on the host network. Load after helpers.

OFFLINE_PROXY=http://127.0.0.1:9

# cri_up: start the file's containerd with no registry reachable, point
# crictl at it and import the engine and sandbox images (call from
# setup_file).
cri_up() {
	HTTPS_PROXY=$OFFLINE_PROXY HTTP_PROXY=$OFFLINE_PROXY NO_PROXY= stack_up
	export CONTAINERD_ADDRESS=$RK_DIR/containerd.sock
	export CRICTL_CONFIG=$BATS_FILE_TMPDIR/crictl.yaml
	cat >"$CRICTL_CONFIG" <<-EOF
		runtime-endpoint: unix://$RK_DIR/containerd.sock
		image-endpoint: unix://$RK_DIR/containerd.sock
		timeout: 120
	EOF

	# CRI keeps its containers and images in containerd's k8s.io namespace.
	k8s_ctr images import "$IMAGES/cpu-engine.tar" >/dev/null 2>&1 ||
		die "cannot import $IMAGES/cpu-engine.tar into namespace k8s.io"
	local sandbox
	sandbox=$("$BIN/containerd" --config "$RK_DIR/config.toml" config dump 2>/dev/null |
		sed -n "s/^ *sandbox = ['\"]\(.*\)['\"]$/\1/p")
	[ -n "$sandbox" ] || die "no sandbox image in containerd's config dump"
	make_pause_image "$IMAGES/base.tar" "$sandbox" "$BATS_FILE_TMPDIR/pause.tar"
	k8s_ctr images import "$BATS_FILE_TMPDIR/pause.tar" >/dev/null 2>&1 ||
		die "cannot import the sandbox image $sandbox"
	rm -f "$BATS_FILE_TMPDIR/pause.tar"
}

k8s_ctr() {
	"$BIN/ctr" --address "$RK_DIR/containerd.sock" -n k8s.io "$@"
}

cri() {
	"$BIN/crictl" --config "$CRICTL_CONFIG" "$@"
}

# cri_do ARGS...: run crictl, print it and its output, fail on an error; the
# result (an id, for runp/create) is in $output.
cri_do() {
	echo "\$ crictl $*" >&2
	local err=$BATS_TEST_TMPDIR/crictl.err
	if ! output=$(cri "$@" 2>"$err"); then
		sed 's/^/  /' "$err" >&2
		die "crictl $* failed: $(grep -v 'level=warn' "$err" | tail -1)"
	fi
	printf '%s\n' "$output" | sed 's/^/  /' >&2
	output=$(tail -n1 <<<"$output")
}

# make_pause_image BASE.tar NAME OUT.tar: the image archive BASE.tar with its
# command replaced by `sleep infinity`, named NAME.
make_pause_image() {
	oci_python - "$@" <<'PY'
import sys
import oci_tar
base, name, out = sys.argv[1:4]
index, a = oci_tar.read(base)
entry = index["manifests"][0]
manifest = a.get_json(entry["digest"])
config = a.get_json(manifest["config"]["digest"])
config["config"]["Entrypoint"] = ["sleep", "infinity"]
config["config"].pop("Cmd", None)
manifest["config"].update(a.add_json(config))
desc = a.add_json(manifest, entry["mediaType"])
desc["annotations"] = oci_tar.image_name(name, tag_annotation=False)
a.write(out, [desc])
PY
}

# pod_config NAME: write a host-network pod config, print its path.
pod_config() {
	local f=$BATS_TEST_TMPDIR/pod-$1.json
	jq -n --arg name "$1" '{metadata: {name: $name, namespace: "rekindle", uid: ($name + "-uid"), attempt: 0},
		linux: {security_context: {namespace_options: {network: 2, pid: 1}}}}' >"$f"
	echo "$f"
}

# engine_config IMAGE PORT: write a container config for the engine listening
# on 127.0.0.1:PORT, print its path.
engine_config() {
	local f=$BATS_TEST_TMPDIR/ctr-$RANDOM.json
	jq -n --arg image "$1" --arg port "$2" '{metadata: {name: "engine"}, image: {image: $image},
		envs: [{key: "ENGINE_PORT", value: $port}, {key: "ENGINE_HOST", value: "127.0.0.1"}],
		linux: {security_context: {namespace_options: {network: 2, pid: 1}}}}' >"$f"
	echo "$f"
}

# run_engine_pod NAME IMAGE PORT: a pod NAME with the engine container from
# IMAGE, started; sets POD and CTR.
run_engine_pod() {
	local pod ctr
	pod=$(pod_config "$1")
	ctr=$(engine_config "$2" "$3")
	cri_do runp "$pod"
	POD=$output
	cri_do create "$POD" "$ctr" "$pod"
	CTR=$output
	cri_do start "$CTR"
}

# create_from_image NAME IMAGE PORT: a new pod NAME and, in it, a container
# created (not started) from IMAGE; sets POD and CTR.
create_from_image() {
	local pod ctr err=$BATS_TEST_TMPDIR/create.err
	pod=$(pod_config "$1")
	ctr=$(engine_config "$2" "$3")
	cri_do runp "$pod"
	POD=$output
	CTR=$(cri create "$POD" "$ctr" "$pod" 2>"$err") || die "crictl create of $2 failed: $(cat "$err")"
}
