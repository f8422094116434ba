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
load cri

setup_file() {
	need_built crictl
	cri_up
}

teardown() {
	[ -n "${RK_DIR:-}" ] && cri rmp --all --force >/dev/null 2>&1
	true
}

teardown_file() {
	stack_down
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

# assert_resumed PORT: the engine on PORT, in container $CTR, is the recorded
# process, resumed, its weights intact in memory.
assert_resumed() {
	is "$(state_of "$1" pid)" "$E_PID" "same engine process (pid in the container)"
	is "$(state_of "$1" start_time)" "$E_START" "same start time: restored, not restarted"
	local c
	c=$(state_of "$1" counter)
	[ "$c" -ge "$E_COUNTER" ] || die "counter went back from $E_COUNTER to $c"
	sleep 0.5
	[ "$(state_of "$1" counter)" -gt "$c" ] || die "counter stopped after the restore"
	is "$(engine POST "$1" /generate "$PROMPT" | jq -r .text)" "$E_TEXT" "greedy output"
	weights_intact "$1" "$CTR" cri exec
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
	# containerd-patches/checkpointimage-resolve-the-base-image-locally-befor: the base image comes from the local store.
	logged "base image $ENGINE_IMAGE (sha256:[0-9a-f]*) found in the local store by digest"
	logged "Restored container $CTR successfully"
	# containerd-patches/cri-restore-checkpoint-images-from-the-extracted-che: CRI sets the checkpoint up in the cache once
	# (restore/checkpointimage/unpacked.go: from the unpacked image when the import unpacked it, else by
	# extracting the layer); a second restore of the image reads it from there.
	logged "checkpoint cache\(: using the unpacked checkpoint image as the\| miss: building\) extracted checkpoint of checkpoint layer"
	cri_do rmp --force "$POD"
	run_engine_pod dst2 "$image" "$port"
	wait_healthy "$port"
	assert_resumed "$port"
	logged "checkpoint cache hit: extracted checkpoint of checkpoint layer"
}

@test "crictl: a CRI checkpoint, made an image by oci-checkpoint import, restores with create and start" {
	local port image=rekindle.local/ckpt:cri-import
	port=$(free_port)
	run_engine_pod isrc "$ENGINE_IMAGE" "$port"
	wait_healthy "$port"
	record_engine "$port"
	cri_do checkpoint --export="$BATS_TEST_TMPDIR/ck.tar" "$CTR"
	cri_do rmp --force "$POD"
	ocicp -n k8s.io import --port "$port" "$BATS_TEST_TMPDIR/ck.tar" "$image"
	rm -f "$BATS_TEST_TMPDIR/ck.tar"
	ocicp -n k8s.io inspect "$image"
	[[ $output == *"Made by:     import of a CRI checkpoint archive"* ]] || die "inspect does not say it was imported"

	run_engine_pod idst "$image" "$port"
	wait_healthy "$port"
	assert_resumed "$port"
	logged "Restored container $CTR successfully"
}

# checkpoint_engine_pod NAME IMAGE PORT [CREATE_FLAGS...]: run the engine in
# pod NAME, record its answer, checkpoint it with oci-checkpoint into IMAGE
# as an archive and import that, as a pulled image would be (CRI mounts the
# checkpoint image's unpacked snapshot); the source pod goes.
checkpoint_engine_pod() {
	local name=$1 image=$2 port=$3
	shift 3
	run_engine_pod "$name" "$ENGINE_IMAGE" "$port"
	wait_healthy "$port"
	record_engine "$port"
	run_cmd "$BIN/oci-checkpoint" -n k8s.io create --port "$port" "$@" \
		--output "oci-archive:$BATS_TEST_TMPDIR/image.tar" "$CTR" "$image"
	cri_do rmp --force "$POD"
	k8s_ctr images import "$BATS_TEST_TMPDIR/image.tar" >/dev/null 2>&1 || die "cannot import $image"
	rm -f "$BATS_TEST_TMPDIR/image.tar"
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

@test "crictl: an oci-checkpoint image with its pages images compressed restores through CRI, the runc shim decoding them" {
	local port image=rekindle.local/ckpt:cri-pages
	port=$(free_port)
	checkpoint_engine_pod psrc "$image" "$port" --compression pages
	create_from_image pdst "$image" "$port"
	start_resumed "$port"
	logged "decoded [0-9]* compressed pages images"
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
	run_cmd "$REKINDLE_ROOT/systemd/rekindle-cache-gc.sh" --address "$RK_DIR/containerd.sock" --max-age 0s --max-size 0
	run_cmd k8s_ctr snapshots ls
	[[ $output == *"checkpoint-restore/$CTR/checkpoint"* ]] || die "no snapshot holds the checkpoint of container $CTR"

	start_resumed "$port"
}

# holds: the containers' holds on checkpoint cache entries (containerd-patches/cri-restore-checkpoint-images-from-the-extracted-che).
holds() {
	k8s_ctr snapshots ls 2>/dev/null | awk '$1 ~ /^checkpoint-restore\/.*\/checkpoint$/ {print $1}'
}

no_holds() {
	[ -z "$(holds)" ]
}

@test "crictl: a restore that fails on a damaged checkpoint drops its cache entry; the next pod restores" {
	local port image=rekindle.local/ckpt:cri-damaged layer
	port=$(free_port)
	run_engine_pod dsrc "$ENGINE_IMAGE" "$port"
	wait_healthy "$port"
	record_engine "$port"
	cri_do checkpoint --export="$BATS_TEST_TMPDIR/ck.tar" "$CTR"
	cri_do rmp --force "$POD"
	# A symlink no checkpoint needs: containerd then extracts the layer into
	# its cache instead of reading the unpacked image, a copy that a full
	# disk or damage can cut short.
	ln -s /etc/hostname "$BATS_TEST_TMPDIR/stray-link"
	tar -rf "$BATS_TEST_TMPDIR/ck.tar" -C "$BATS_TEST_TMPDIR" stray-link
	checkpoint_image "$BATS_TEST_TMPDIR/ck.tar" "$image" engine "$BATS_TEST_TMPDIR/image.tar"
	k8s_ctr images import "$BATS_TEST_TMPDIR/image.tar" >/dev/null 2>&1 || die "cannot import $image"

	run_engine_pod d1 "$image" "$port"
	wait_healthy "$port"
	assert_resumed "$port"
	layer=$(grep -o 'stored extracted checkpoint of checkpoint layer sha256:[0-9a-f]*' "$RK_DIR/containerd.log" |
		tail -1 | awk '{print $NF}')
	[ -n "$layer" ] || die "containerd did not extract the checkpoint into its cache"
	# The collector takes the removed container's hold on the entry
	# (containerd-patches/metadata-unlink-a-collected-snapshot-from-its-parent unlinks it from the entry's copy).
	cri_do rmp --force "$POD"
	wait_for "the collector to take the removed container's hold" 30 no_holds

	# After CreateContainer, which would find a damaged entry (its stamp)
	# and extract it again: CRIU meets the damage.
	create_from_image d2 "$image" "$port"
	damage_cached_pages k8s.io "$layer"
	! cri start "$CTR" >/dev/null 2>&1 || die "a restore from a damaged checkpoint started"
	grep 'checkpoint cache' "$RK_DIR/containerd.log" | tail -n 4 >&2 # shown if this test fails
	is "$(grep -c "checkpoint cache: dropped 2 snapshot(s) of checkpoint layer $layer after a failed restore, 0 still in use" "$RK_DIR/containerd.log")" \
		"1" "the data view and the extracted copy dropped"
	cri_do rmp --force "$POD"

	run_engine_pod d3 "$image" "$port"
	wait_healthy "$port"
	assert_resumed "$port"
	is "$(grep -c "checkpoint cache: stored extracted checkpoint of checkpoint layer $layer" "$RK_DIR/containerd.log")" \
		"2" "extracted anew"
}

@test "crictl: a restore into a container that drops the checkpoint's capabilities is refused (guard/check/privileges.go)" {
	local port image=rekindle.local/ckpt:cri-caps ctr err=$BATS_TEST_TMPDIR/start.err
	port=$(free_port)
	checkpoint_engine_pod csrc "$image" "$port"
	cri_do runp "$(pod_config cdst)"
	POD=$output
	ctr=$(engine_config "$image" "$port")
	jq '.linux.security_context.capabilities.drop_capabilities = ["ALL"]' "$ctr" >"$ctr.new" && mv "$ctr.new" "$ctr"
	CTR=$(cri create "$POD" "$ctr" "$(pod_config cdst)" 2>"$err") || die "crictl create of $image failed: $(cat "$err")"
	! cri start "$CTR" 2>"$err" || die "a restore with every capability dropped started"
	grep -q 'refusing to restore: checkpoint task 1 thread 1 (.*python3.*): cap_prm has CAP_CHOWN' "$err" ||
		die "the error does not name the capability: $(cat "$err")"
	[ "$(cri inspect "$CTR" | jq -r .status.state)" != CONTAINER_RUNNING ] || die "the refused container runs"
	! curl -sf "http://127.0.0.1:$port/health" >/dev/null || die "an engine answers on port $port"
}

@test "crictl: a checkpoint image holding an image file runc does not check is refused at start, as through nerdctl run, and nothing is left (guard/check/images.go)" {
	local port image=rekindle.local/ckpt:cri-unknown err=$BATS_TEST_TMPDIR/start.err
	port=$(free_port)
	run_engine_pod usrc "$ENGINE_IMAGE" "$port"
	wait_healthy "$port"
	cri_do checkpoint --export="$BATS_TEST_TMPDIR/ck.tar" "$CTR"
	cri_do rmp --force "$POD"
	# An image file of a kind this runc does not know, as a newer CRIU or a
	# crafted layer would add one.
	mkdir -p "$BATS_TEST_TMPDIR/add/checkpoint"
	printf 'x' >"$BATS_TEST_TMPDIR/add/checkpoint/netns-ct-10.img"
	tar -rf "$BATS_TEST_TMPDIR/ck.tar" -C "$BATS_TEST_TMPDIR/add" checkpoint/netns-ct-10.img
	checkpoint_image "$BATS_TEST_TMPDIR/ck.tar" "$image" engine "$BATS_TEST_TMPDIR/image.tar"
	k8s_ctr images import "$BATS_TEST_TMPDIR/image.tar" >/dev/null 2>&1 || die "cannot import $image"

	create_from_image u1 "$image" "$port"
	! cri start "$CTR" 2>"$err" || die "a restore of an image with an unknown image file started"
	grep -q 'refusing to restore: checkpoint image netns-ct-10.img is no image that runc checks' "$err" ||
		die "the error does not name the file: $(cat "$err")"
	[ "$(cri inspect "$CTR" | jq -r .status.state)" != CONTAINER_RUNNING ] || die "the refused container runs"
	! curl -sf "http://127.0.0.1:$port/health" >/dev/null || die "an engine answers on port $port"
	run "$BIN/runc" --root "$RK_DIR/runc/k8s.io" list -q
	! grep -q "$CTR" <<<"$output" || die "runc still lists the refused container: $output"
}

@test "crictl: a checkpoint image with a regular file named as the key of the stdio pipe runc inherits is refused at start, as through runc restore, and nothing is left (guard/check/inherit.go)" {
	local port image=rekindle.local/ckpt:cri-key err=$BATS_TEST_TMPDIR/start.err d=$BATS_TEST_TMPDIR/ck key
	port=$(free_port)
	run_engine_pod ksrc "$ENGINE_IMAGE" "$port"
	wait_healthy "$port"
	cri_do checkpoint --export="$BATS_TEST_TMPDIR/ck.tar" "$CTR"
	cri_do rmp --force "$POD"
	# The root task holds, at fd 50, a regular file named as the pipe its
	# stdout was: CRIU would hand it the new container's stdout.
	mkdir -p "$d" && tar -xf "$BATS_TEST_TMPDIR/ck.tar" -C "$d" || die "cannot unpack the checkpoint"
	key=$(jq -r '[.[] | select(startswith("pipe:"))][0]' "$d/checkpoint/descriptors.json")
	[ "$key" != null ] || die "the checkpoint's stdio holds no pipe: $(cat "$d/checkpoint/descriptors.json")"
	root_file "$d/checkpoint" "/$key" 50
	tar -cf "$BATS_TEST_TMPDIR/hostile.tar" -C "$d" . || die "cannot pack the checkpoint"
	checkpoint_image "$BATS_TEST_TMPDIR/hostile.tar" "$image" engine "$BATS_TEST_TMPDIR/image.tar"
	k8s_ctr images import "$BATS_TEST_TMPDIR/image.tar" >/dev/null 2>&1 || die "cannot import $image"

	create_from_image k1 "$image" "$port"
	! cri start "$CTR" 2>"$err" || die "a restore of an image with a file named as the stdio's key started"
	grep -q "refusing to restore: checkpoint image files.img: file 9999 (a regular file) is named" "$err" ||
		die "the error does not name the file: $(cat "$err")"
	[ "$(cri inspect "$CTR" | jq -r .status.state)" != CONTAINER_RUNNING ] || die "the refused container runs"
	! curl -sf "http://127.0.0.1:$port/health" >/dev/null || die "an engine answers on port $port"
	run "$BIN/runc" --root "$RK_DIR/runc/k8s.io" list -q
	! grep -q "$CTR" <<<"$output" || die "runc still lists the refused container: $output"
}
