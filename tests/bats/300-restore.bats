#!/usr/bin/env bats
# Restore-on-create (containerd-patches/): `nerdctl run CHECKPOINT-IMAGE`
# restores the checkpointed process, through the extracted-checkpoint cache,
# with the base image taken from the local store.
#
# The checkpoint images are made here without oci-checkpoint: `nerdctl
# checkpoint create` for the CRIU images, then the plain checkpointctl layout
# (checkpoint/, spec.dump, config.dump, rootfs-diff.tar, deleted.files)
# packaged as a one-layer OCI image with no Rekindle annotations, so these
# tests show the patches restore any image in that format, not only ours
# (400-oci-checkpoint.bats covers oci-checkpoint's images).

load helpers

# Every registry request containerd makes fails at once: the restores below
# must not need one.
OFFLINE_PROXY=http://127.0.0.1:9

setup_file() {
	need_built
	stack_up_offline
	load_image base
	load_image cpu-engine

	# One engine checkpoint image shared by the tests that only read it.
	local port
	port=$(free_port)
	start_engine ck-src "$port"
	local text
	text=$(engine POST "$port" /generate "$PROMPT" | jq -r .text)
	answered "before the checkpoint" "$text"
	echo "$text" >"$BATS_FILE_TMPDIR/ck1.text"
	state_of "$port" pid >"$BATS_FILE_TMPDIR/ck1.pid"
	state_of "$port" start_time >"$BATS_FILE_TMPDIR/ck1.start"
	state_of "$port" counter >"$BATS_FILE_TMPDIR/ck1.counter"
	make_checkpoint_image ck-src rekindle.local/ckpt:engine
	run_nerdctl rm -f ck-src
}

# Every test's containers and checkpoint images go, also when it failed
# half way, so that the next test starts from the shared image alone; a test
# that failed with containerd killed gets it back.
teardown() {
	[ -n "${RK_DIR:-}" ] || return 0
	local pid
	pid=$(cat "$RK_DIR/containerd.pid" 2>/dev/null) || true
	if [ -z "$pid" ] || gone "$pid"; then
		stack_up_offline || true
	fi
	remove_containers
	remove_images 'rekindle.local/ckpt:*' rekindle.local/ckpt:engine
}

teardown_file() {
	stack_down
}

stack_up_offline() {
	HTTPS_PROXY=$OFFLINE_PROXY HTTP_PROXY=$OFFLINE_PROXY NO_PROXY= stack_up
}

log_count() {
	grep -c -- "$1" "$RK_DIR/containerd.log" || true
}

# cache_entries LAYER: the cache snapshots of one checkpoint layer.
cache_entries() {
	"$BIN/ctr" --address "$RK_DIR/containerd.sock" -n default snapshots ls 2>/dev/null |
		awk -v k="checkpoint-cache/$1/" 'index($1, k) == 1 {print $1, $NF}'
}

no_cache_entries() {
	[ -z "$(cache_entries "$1")" ]
}

# grown FILE N: FILE has more than N lines.
grown() {
	[ "$(wc -l <"$1")" -gt "$2" ]
}

# layer_of IMAGE: digest of the checkpoint layer of IMAGE.
layer_of() {
	cat "$BATS_FILE_TMPDIR/layer-${1//[:\/]/_}"
}

# make_checkpoint_image SRC IMAGE: checkpoint the running container SRC
# (which stops it) and store it as checkpoint image IMAGE. CKPT_BASE_NAME
# and CKPT_BASE_REF override the base image recorded in config.dump;
# CKPT_SYMLINK=1 adds a symlink to the archive.
make_checkpoint_image() {
	local src=$1 image=$2
	local dir=$BATS_FILE_TMPDIR/ck-${image//[:\/]/_}
	local ctr=("$BIN/ctr" --address "$RK_DIR/containerd.sock" -n default)
	rm -rf "$dir" && mkdir -p "$dir/archive"

	run_nerdctl inspect -f '{{.ID}}' "$src"
	local id=${lines[-1]}
	"${ctr[@]}" containers info "$id" >"$dir/info.json" 2>/dev/null
	local base_name base_ref base_cfg
	base_name=$(jq -r .Image "$dir/info.json")
	run_nerdctl image inspect --mode native "$base_name"
	base_ref=${base_name%:*}@$(jq -r '.[0].Image.Target.digest' <<<"$output")
	base_cfg=$(jq -r '.[0].ImageConfigDesc.digest' <<<"$output")
	"${ctr[@]}" content get "$base_cfg" >"$dir/base-config.json" 2>/dev/null

	run_nerdctl checkpoint create --checkpoint-dir "$dir/criu" "$src" ck
	mv "$dir/criu/ck" "$dir/archive/checkpoint"
	# CKPT_SYMLINK=1: an entry no checkpoint needs, which restores must not follow.
	[ "${CKPT_SYMLINK:-}" != 1 ] || ln -s /etc/hostname "$dir/archive/stray-link"

	jq .Spec "$dir/info.json" >"$dir/archive/spec.dump"
	jq -n --arg id "$id" --arg name "$src" \
		--arg bname "${CKPT_BASE_NAME:-$base_name}" --arg bref "${CKPT_BASE_REF:-$base_ref}" \
		'{id: $id, name: $name, rootfsImage: $bname, rootfsImageName: $bname,
		  rootfsImageRef: $bref, runtime: "io.containerd.runc.v2",
		  createdTime: (now | todate), checkpointedTime: (now | todate)}' >"$dir/archive/config.dump"
	echo '{}' >"$dir/archive/stats-dump"

	# The container's writable layer: files as rootfs-diff.tar, overlay
	# whiteouts (deleted files) as deleted.files.
	local upper
	upper=$("${ctr[@]}" snapshots --snapshotter "$(jq -r .Snapshotter "$dir/info.json")" \
		mounts /x "$(jq -r .SnapshotKey "$dir/info.json")" 2>/dev/null | sed -n 's/.*upperdir=\([^,]*\).*/\1/p')
	[ -d "$upper" ] || die "no upper dir for container $src"
	python3 - "$upper" "$dir/archive" <<'PY'
import json, os, stat, sys, tarfile
upper, out = sys.argv[1:3]
deleted = []
with tarfile.open(os.path.join(out, "rootfs-diff.tar"), "w") as t:
    for root, dirs, files in os.walk(upper):
        for n in sorted(dirs + files):
            p = os.path.join(root, n)
            rel = os.path.relpath(p, upper)
            st = os.lstat(p)
            if stat.S_ISCHR(st.st_mode) and st.st_rdev == 0:
                deleted.append("/" + rel)
                continue
            t.add(p, arcname=rel, recursive=False)
json.dump(deleted, open(os.path.join(out, "deleted.files"), "w"))
PY

	oci_python - "$dir/archive" "$dir/base-config.json" "$image" "$src" "$dir/image.tar" \
		"$BATS_FILE_TMPDIR/layer-${image//[:\/]/_}" <<'PY'
import io, json, os, sys, tarfile
import oci_tar
ckdir, base_cfg, name, cname, out, layer_out = sys.argv[1:7]
buf = io.BytesIO()
with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as t:
    for root, dirs, files in os.walk(ckdir):
        dirs.sort()
        for n in sorted(dirs + files):
            p = os.path.join(root, n)
            t.add(p, arcname=os.path.relpath(p, ckdir), recursive=False)
a = oci_tar.Archive()
layer = a.add(buf.getvalue(), oci_tar.LAYER)
base = json.load(open(base_cfg))
keep = ("Entrypoint", "Cmd", "Env", "WorkingDir", "ExposedPorts")
cfg = {"architecture": base.get("architecture", "amd64"), "os": "linux",
       "config": {k: v for k, v in base.get("config", {}).items() if k in keep},
       "rootfs": {"type": "layers", "diff_ids": [layer["digest"]]}}
man = {"schemaVersion": 2, "mediaType": oci_tar.MANIFEST,
       "config": a.add_json(cfg, oci_tar.CONFIG), "layers": [layer],
       "annotations": {"org.criu.checkpoint.container.name": cname}}
desc = a.add_json(man, oci_tar.MANIFEST)
desc["annotations"] = oci_tar.image_name(name)
a.write(out, [desc])
open(layer_out, "w").write(layer["digest"])
PY
	run_nerdctl load -i "$dir/image.tar"
	rm -rf "$dir"
}

@test "nerdctl run of a checkpoint image resumes the engine, no registry reachable" {
	local port image=rekindle.local/ckpt:engine
	port=$(free_port)
	run_nerdctl run -d --name r1 -p "127.0.0.1:$port:30000" "$image"
	wait_healthy "$port"

	is "$(state_of "$port" pid)" "$(cat "$BATS_FILE_TMPDIR/ck1.pid")" "same engine process (pid in the container)"
	is "$(state_of "$port" start_time)" "$(cat "$BATS_FILE_TMPDIR/ck1.start")" "same start time: restored, not restarted"
	local c
	c=$(state_of "$port" counter)
	[ "$c" -ge "$(cat "$BATS_FILE_TMPDIR/ck1.counter")" ] || die "counter went back to $c"
	local before
	before=$(cat "$BATS_FILE_TMPDIR/ck1.text")
	answered "before the checkpoint" "$before"
	is "$(engine POST "$port" /generate "$PROMPT" | jq -r .text)" "$before" "greedy output"
	weights_intact "$port" r1
	# runc-patches/libct-criu-bring-up-the-loopback-of-the-restored-con: the restored network namespace's lo is up, with no
	# wake helper in this image to bring it up.
	run_nerdctl exec r1 cat /sys/class/net/lo/flags
	(( output & 1 )) || die "lo is down in the restored container (flags $output)"

	grep -q "image $image is a checkpoint of container" "$RK_DIR/containerd.log" ||
		die "containerd did not log the restore of $image"
	grep -q "base image rekindle.local/cpu-engine:latest .* found in the local store by digest" "$RK_DIR/containerd.log" ||
		die "base image not resolved locally by digest"
	run_nerdctl rm -f r1
}

# nerdctl unpacked the image to run it: restore/checkpointimage/unpacked.go reads the
# checkpoint from that snapshot instead of extracting the layer again.
@test "restores read the checkpoint from the unpacked image, extracting nothing" {
	local image=rekindle.local/ckpt:engine layer p1 p2 misses
	layer=$(layer_of "$image")
	p1=$(free_port)
	run_nerdctl run -d --name r2a -p "127.0.0.1:$p1:30000" "$image"
	wait_healthy "$p1"
	misses=$(log_count "checkpoint cache miss: .* of checkpoint layer $layer")
	local hits
	hits=$(log_count "checkpoint cache hit: extracted checkpoint of checkpoint layer $layer")

	p2=$(free_port)
	run_nerdctl run -d --name r2b -p "127.0.0.1:$p2:30000" "$image"
	wait_healthy "$p2"
	is "$(log_count "checkpoint cache miss: .* of checkpoint layer $layer")" "$misses" "cache misses after the second restore"
	is "$(log_count "checkpoint cache hit: extracted checkpoint of checkpoint layer $layer")" "$((hits + 1))" "cache hits"
	is "$(log_count "checkpoint cache: using the unpacked checkpoint image as the extracted checkpoint of checkpoint layer $layer")" "1" "the unpacked image used"
	is "$(log_count "checkpoint cache: stored extracted checkpoint of checkpoint layer $layer")" "0" "extractions"
	is "$(cache_entries "$layer" | grep -c '/data-view View$')" "1" "the cache's view of the checkpoint"
	run_nerdctl rm -f r2a r2b
}

@test "two concurrent restores of a new image both succeed, setting up the cache once" {
	local image=rekindle.local/ckpt:concurrent port layer
	port=$(free_port)
	start_engine cc-src "$port"
	make_checkpoint_image cc-src "$image"
	run_nerdctl rm -f cc-src
	layer=$(layer_of "$image")
	[ -z "$(cache_entries "$layer")" ] || die "cache not cold for $image"

	local pa pb ja jb
	pa=$(free_port)
	pb=$(free_port)
	"$REKINDLE_ROOT/scripts/nerdctl.sh" "$RK_DIR" run -d --name r3a -p "127.0.0.1:$pa:30000" "$image" \
		>"$BATS_TEST_TMPDIR/a.out" 2>&1 &
	ja=$!
	"$REKINDLE_ROOT/scripts/nerdctl.sh" "$RK_DIR" run -d --name r3b -p "127.0.0.1:$pb:30000" "$image" \
		>"$BATS_TEST_TMPDIR/b.out" 2>&1 &
	jb=$!
	wait "$ja" || die "first restore failed: $(cat "$BATS_TEST_TMPDIR/a.out")"
	wait "$jb" || die "second restore failed: $(cat "$BATS_TEST_TMPDIR/b.out")"
	wait_healthy "$pa"
	wait_healthy "$pb"
	is "$(log_count "checkpoint cache: using the unpacked checkpoint image as the extracted checkpoint of checkpoint layer $layer")" "1" "checkpoint set up"
	is "$(log_count "checkpoint cache: stored extracted checkpoint of checkpoint layer $layer")" "0" "extractions"
	is "$(log_count "checkpoint cache: stored root filesystem of checkpoint layer $layer")" "1" "rootfs diff applications"
	is "$(state_of "$pa" start_time)" "$(state_of "$pb" start_time)" "both are the checkpointed process"
	run_nerdctl rm -f r3a r3b
}

@test "removing the checkpoint image lets GC reclaim its cache entry" {
	local image=rekindle.local/ckpt:gc port layer keep
	port=$(free_port)
	start_engine gc-src "$port"
	make_checkpoint_image gc-src "$image"
	run_nerdctl rm -f gc-src
	layer=$(layer_of "$image")
	keep=$(layer_of rekindle.local/ckpt:engine)
	# The shared image's cache entry must exist for the check below to mean
	# something: restore it once (a hit when an earlier test did).
	if [ -z "$(cache_entries "$keep")" ]; then
		run_nerdctl run -d --name r4k rekindle.local/ckpt:engine
		run_nerdctl rm -f r4k
	fi
	run_nerdctl run -d --name r4 "$image"
	run_nerdctl rm -f r4
	[ -n "$(cache_entries "$layer")" ] || die "no cache entry for $image to reclaim"

	run_nerdctl rmi "$image"
	wait_for "GC to remove the cache entry of $layer" 30 no_cache_entries "$layer"
	is "$(cache_entries "$layer")" "" "cache entry of the removed image"
	[ -n "$(cache_entries "$keep")" ] || die "GC also took the cache entry of rekindle.local/ckpt:engine, still in use"
}

@test "a containerd killed during extraction leaves nothing a later restore trusts" {
	local image=rekindle.local/ckpt:big port layer
	port=$(free_port)
	# A few hundred MiB of process memory make the extraction last long
	# enough to be interrupted. A symlink in the archive makes containerd
	# extract the layer (filtering it out) rather than use nerdctl's unpack.
	start_engine big-src "$port" -e ENGINE_STATE_MB=384
	CKPT_SYMLINK=1 make_checkpoint_image big-src "$image"
	run_nerdctl rm -f big-src
	layer=$(layer_of "$image")

	"$REKINDLE_ROOT/scripts/nerdctl.sh" "$RK_DIR" run -d --name r5 "$image" >"$BATS_TEST_TMPDIR/r5.out" 2>&1 &
	local job=$! i
	for ((i = 0; i < 600; i++)); do
		[ "$(log_count "checkpoint cache miss: building extracted checkpoint of checkpoint layer $layer")" -gt 0 ] && break
		sleep 0.05
	done
	local pid
	pid=$(cat "$RK_DIR/containerd.pid")
	kill -KILL "$pid"
	wait_for "containerd $pid to die" 10 gone "$pid"
	wait "$job" && die "restore r5 succeeded although containerd was killed"
	is "$(log_count "not using its unpacked snapshot .*stray-link is not a directory or regular file")" "1" "the symlink named"
	[ "$(log_count "checkpoint cache: stored extracted checkpoint of checkpoint layer $layer")" -eq 0 ] ||
		die "extraction finished before the kill; raise ENGINE_STATE_MB in this test"

	stack_up_offline
	is "$(cache_entries "$layer" | grep -c ' Committed$')" "0" "committed cache entries after the kill"

	run_nerdctl '?' rm -f r5
	port=$(free_port)
	run_nerdctl run -d --name r5b -p "127.0.0.1:$port:30000" "$image"
	wait_healthy "$port"
	is "$(log_count "checkpoint cache: stored extracted checkpoint of checkpoint layer $layer")" "1" "extracted anew"
	run_nerdctl rm -f r5b
}

@test "a damaged pages image in the cache is found before CRIU: the entry is extracted again and the restore answers" {
	local image=rekindle.local/ckpt:damaged port layer
	port=$(free_port)
	start_engine dmg-src "$port"
	local before
	before=$(engine POST "$port" /generate "$PROMPT" | jq -r .text)
	answered "before the checkpoint" "$before"
	# The symlink makes containerd extract the layer into the cache, the
	# copy a full disk or damage can cut short.
	CKPT_SYMLINK=1 make_checkpoint_image dmg-src "$image"
	run_nerdctl rm -f dmg-src
	layer=$(layer_of "$image")
	run_nerdctl run -d --name dmg1 -p "127.0.0.1:$port:30000" "$image"
	wait_healthy "$port"
	run_nerdctl rm -f dmg1

	# The entry's stamp (restore/checkpointimage/integrity.go) no longer
	# matches: the blob is read through, found intact, and the entry
	# extracted again before anything runs.
	damage_cached_pages default "$layer"

	run_nerdctl run -d --name dmg3 -p "127.0.0.1:$port:30000" "$image"
	wait_healthy "$port"
	is "$(engine POST "$port" /generate "$PROMPT" | jq -r .text)" "$before" "the rebuilt restore answers as before"
	is "$(log_count "checkpoint layer $layer, whose pages images changed since they were extracted: extracting it again")" "1" \
		"the damaged entry dropped"
	is "$(log_count "checkpoint cache: stored extracted checkpoint of checkpoint layer $layer")" "2" "extracted anew"
	run_nerdctl rm -f dmg3
}

@test "a bind mount missing from the new container is named before CRIU runs" {
	local image=rekindle.local/ckpt:bind data=$BATS_TEST_TMPDIR/data
	mkdir -p "$data"
	run_nerdctl run -d --name bind-src --network none -v "$data:/data" "$BASE_IMAGE" \
		sh -c 'while :; do date >> /data/log; sleep 0.2; done'
	sleep 0.5
	make_checkpoint_image bind-src "$image"
	run_nerdctl rm -f bind-src

	run_nerdctl 1 run -d --name r6 --network none "$image"
	is "$output" "~checkpoint was taken with bind mount\(s\) the new container lacks: /data \(was bound from $data\)" "error names the mount"
	run_nerdctl '?' rm -f r6

	run_nerdctl run -d --name r6b --network none -v "$data:/data" "$image"
	local n
	n=$(wc -l <"$data/log")
	wait_for "restored loop to write to /data" 10 grown "$data/log" "$n"
	run_nerdctl rm -f r6b
}

# nvidia-ctk's CDI specs bind driver files such as
# /usr/share/glvnd/egl_vendor.d/10_nvidia.json, which are symlinks on many
# hosts. CRIU binds an external mount's source without following a symlink,
# so before runc-patches/libct-criu-hand-CRIU-the-resolved-source-of-bind-mou such a container checkpointed but could not be
# restored ("Can't remount ... with MS_PRIVATE").
@test "a container given a CDI device whose host file is a symlink restores with it" {
	local image=rekindle.local/ckpt:cdi cdi=$BATS_TEST_TMPDIR/cdi host=$BATS_TEST_TMPDIR/host
	local file=/usr/share/rekindle-test/vendor.json want='{"vendor": "rekindle-test"}'
	mkdir -p "$cdi" "$host/real"
	echo "$want" >"$host/real/vendor.json"
	ln -s real/vendor.json "$host/vendor.json"
	cat >"$cdi/rekindle-test.yaml" <<EOF
cdiVersion: 0.5.0
kind: rekindle.test/dev
devices:
- name: "0"
  containerEdits:
    mounts:
    - hostPath: $host/vendor.json
      containerPath: $file
      options: [ro, nosuid, nodev, bind]
EOF
	local dev=(--cdi-spec-dirs "$cdi" --device rekindle.test/dev=0) port pid start
	port=$(free_port)
	start_engine cdi-src "$port" "${dev[@]}"
	run_nerdctl exec cdi-src cat "$file"
	is "$output" "$want" "the device's file in the container"
	pid=$(state_of "$port" pid)
	start=$(state_of "$port" start_time)
	make_checkpoint_image cdi-src "$image"
	run_nerdctl rm -f cdi-src

	port=$(free_port)
	run_nerdctl run -d --name r8 -p "127.0.0.1:$port:30000" "${dev[@]}" "$image"
	wait_healthy "$port"
	is "$(state_of "$port" pid)/$(state_of "$port" start_time)" "$pid/$start" "same engine process: restored"
	run_nerdctl exec r8 cat "$file"
	is "$output" "$want" "the device's file in the restored container"
	run_nerdctl rm -f r8
}

@test "a checkpoint whose base image is absent fails with one clear error" {
	local image=rekindle.local/ckpt:nobase
	run_nerdctl run -d --name nb-src --network none "$BASE_IMAGE" sh -c 'while :; do sleep 1; done'
	CKPT_BASE_NAME=rekindle.local/missing:1 \
		CKPT_BASE_REF=rekindle.local/missing@sha256:0000000000000000000000000000000000000000000000000000000000000000 \
		make_checkpoint_image nb-src "$image"
	run_nerdctl rm -f nb-src

	run_nerdctl 1 run -d --name r7 --network none "$image"
	is "$output" "~base image rekindle.local/missing:1 .* is not in the local image store and pulling rekindle.local/missing@sha256:0+ failed" "error names the missing image"
	run_nerdctl '?' rm -f r7
}
