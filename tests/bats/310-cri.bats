#!/usr/bin/env bats
# The Kubernetes CRI path: crictl against the private containerd creates pod
# sandboxes and restores checkpoint images with CreateContainer and
# StartContainer, as a kubelet would, with no registry reachable.
#
# Pods run on the host network: the engine binds 127.0.0.1 on a free port
# (ENGINE_PORT), so the restored process finds its socket's address again and
# the test reaches it without entering a network namespace. The sandbox
# ("pause") image is the offline base image running `sleep infinity`, stored
# under the name containerd's config pins for sandboxes, as an offline node
# preloads its pause image.

load helpers

OFFLINE_PROXY=http://127.0.0.1:9

setup_file() {
	need_built crictl
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

teardown() {
	[ -n "${RK_DIR:-}" ] && cri rmp --all --force >/dev/null 2>&1
	true
}

teardown_file() {
	stack_down
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

# checkpoint_image ARCHIVE NAME CONTAINER OUT.tar: package a CRI checkpoint
# archive (crictl checkpoint --export) as a checkpoint image: one
# uncompressed layer that is the archive itself, marked with the checkpoint
# annotations containerd (checkpointctl's) and CRI-O read.
checkpoint_image() {
	oci_python - "$@" <<'PY'
import sys
import oci_tar
archive, name, container, out = sys.argv[1:5]
a = oci_tar.Archive()
layer = a.add_file(archive, oci_tar.LAYER)
config = {"architecture": "amd64", "os": "linux", "config": {},
          "rootfs": {"type": "layers", "diff_ids": [layer["digest"]]}}
manifest = {
    "schemaVersion": 2, "mediaType": oci_tar.MANIFEST,
    "config": a.add_json(config, oci_tar.CONFIG),
    "layers": [layer],
    "annotations": {"org.criu.checkpoint.container.name": container,
                    "io.kubernetes.cri-o.annotations.checkpoint.name": container}}
desc = a.add_json(manifest, oci_tar.MANIFEST)
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

# record_engine PORT: remember the engine's output and identity in E_*.
record_engine() {
	E_TEXT=$(engine POST "$1" /generate "$PROMPT" | jq -r .text)
	answered "before the checkpoint" "$E_TEXT"
	E_PID=$(state_of "$1" pid)
	E_START=$(state_of "$1" start_time)
	E_COUNTER=$(state_of "$1" counter)
}

# assert_resumed PORT: the engine on PORT is the recorded process, resumed.
assert_resumed() {
	is "$(state_of "$1" pid)" "$E_PID" "same engine process (pid in the container)"
	is "$(state_of "$1" start_time)" "$E_START" "same start time: restored, not restarted"
	local c
	c=$(state_of "$1" counter)
	[ "$c" -ge "$E_COUNTER" ] || die "counter went back from $E_COUNTER to $c"
	sleep 0.5
	[ "$(state_of "$1" counter)" -gt "$c" ] || die "counter stopped after the restore"
	is "$(engine POST "$1" /generate "$PROMPT" | jq -r .text)" "$E_TEXT" "greedy output"
	is "$(state_of "$1" loaded_sha256)" "$(state_of "$1" weights_sha256)" "weights checksum"
}

logged() {
	grep -q -- "$1" "$RK_DIR/containerd.log" || die "containerd did not log: $1"
}

@test "a pod sandbox runs on the local sandbox image, no registry reachable" {
	cri_do runp "$(pod_config sandbox-only)"
	local pod=$output
	is "$(jq -r .status.state <<<"$(cri inspectp "$pod" 2>/dev/null)")" "SANDBOX_READY" "sandbox state"
	cri_do stopp "$pod"
	cri_do rmp "$pod"
}

@test "crictl: a CRI checkpoint, as a checkpoint image, restores with create and start" {
	local port image=rekindle.local/ckpt:cri
	port=$(free_port)
	run_engine_pod src "$ENGINE_IMAGE" "$port"
	wait_healthy "$port"
	record_engine "$port"
	local src=$CTR

	# CheckpointContainer, as the kubelet's checkpoint API calls it; the
	# source keeps running until it is removed.
	cri_do checkpoint --export="$BATS_TEST_TMPDIR/ck.tar" "$src"
	tar -tf "$BATS_TEST_TMPDIR/ck.tar" | grep -qx status.dump || die "no status.dump in the CRI checkpoint"
	cri_do rmp --force "$POD"
	checkpoint_image "$BATS_TEST_TMPDIR/ck.tar" "$image" engine "$BATS_TEST_TMPDIR/image.tar"
	k8s_ctr images import "$BATS_TEST_TMPDIR/image.tar" >/dev/null 2>&1 || die "cannot import $image"
	rm -f "$BATS_TEST_TMPDIR/ck.tar" "$BATS_TEST_TMPDIR/image.tar"

	run_engine_pod dst "$image" "$port"
	wait_healthy "$port"
	assert_resumed "$port"

	local info
	info=$(cri inspect "$CTR" 2>/dev/null)
	is "$(jq -r .status.state <<<"$info")" "CONTAINER_RUNNING" "restored container state"
	is "$(jq -r .status.annotations.restored <<<"$info")" "true" "restored annotation"
	is "$(jq -r .status.annotations.checkpointImage <<<"$info")" "$image" "checkpointImage annotation"
	logged "Found checkpoint of container engine in $image"
	# containerd-patches/0003: the base image comes from the local store.
	logged "base image $ENGINE_IMAGE (sha256:[0-9a-f]*) found in the local store by digest"
	logged "Restored container $CTR successfully"
	# containerd-patches/0005: CRI sets the checkpoint up in the cache once
	# (0006: from the unpacked image when the import unpacked it, else by
	# extracting the layer); a second restore of the image reads it from there.
	logged "checkpoint cache\(: using the unpacked checkpoint image as the\| miss: building\) extracted checkpoint of checkpoint layer"
	cri_do rmp --force "$POD"
	run_engine_pod dst2 "$image" "$port"
	wait_healthy "$port"
	assert_resumed "$port"
	logged "checkpoint cache hit: extracted checkpoint of checkpoint layer"
}

# checkpoint_engine_pod NAME IMAGE PORT: run the engine in pod NAME, record
# its answer, checkpoint it with oci-checkpoint into IMAGE as an archive and
# import that, as a pulled image would be (CRI mounts the checkpoint image's
# unpacked snapshot); the source pod goes.
checkpoint_engine_pod() {
	local name=$1 image=$2 port=$3
	run_engine_pod "$name" "$ENGINE_IMAGE" "$port"
	wait_healthy "$port"
	record_engine "$port"
	run_cmd "$BIN/oci-checkpoint" -n k8s.io create --port "$port" \
		--output "oci-archive:$BATS_TEST_TMPDIR/image.tar" "$CTR" "$image"
	cri_do rmp --force "$POD"
	k8s_ctr images import "$BATS_TEST_TMPDIR/image.tar" >/dev/null 2>&1 || die "cannot import $image"
	rm -f "$BATS_TEST_TMPDIR/image.tar"
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

# start_resumed PORT: start CTR; the wake helper resumes the same engine.
start_resumed() {
	cri_do start "$CTR"
	wait_healthy "$1"
	wait_for "the wake helper's status" 30 cri exec "$CTR" cat /.rekindle/status
	is "$(cri exec "$CTR" cat /.rekindle/status 2>/dev/null | jq -r .outcome)" "resumed" "helper outcome"
	assert_resumed "$1"
}

@test "crictl: an oci-checkpoint image of a CRI container restores, the helper resumes it" {
	local port image=rekindle.local/ckpt:cri-oci
	port=$(free_port)
	checkpoint_engine_pod osrc "$image" "$port"
	create_from_image odst "$image" "$port"
	start_resumed "$port"
	logged "Restored container $CTR successfully"
}

@test "crictl: a created restore keeps its checkpoint when the image is removed and the cache pruned before start" {
	local port image=rekindle.local/ckpt:cri-held
	port=$(free_port)
	checkpoint_engine_pod hsrc "$image" "$port"
	create_from_image hdst "$image" "$port"

	# Between create and start: the image goes (containerd's collector runs
	# with --sync) and cache-gc prunes everything it may.
	run_cmd k8s_ctr images rm --sync "$image"
	run_cmd "$REKINDLE_ROOT/scripts/cache-gc.sh" --address "$RK_DIR/containerd.sock" --max-age 0s --max-size 0
	run_cmd k8s_ctr snapshots ls
	[[ $output == *"checkpoint-restore/$CTR/checkpoint"* ]] || die "no snapshot holds the checkpoint of container $CTR"

	start_resumed "$port"
}
