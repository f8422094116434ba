#!/usr/bin/env bats
# A checkpoint image that this host cannot restore (containerd-patches/checkpointimage-start-cold-when-a-host-cannot-restor),
# or whose restore CRIU fails (containerd-patches/tasks-start-cold-when-the-runtime-fails-to-restore-a through nerdctl, containerd-patches/cri-start-cold-when-the-runtime-fails-to-restore-a-c through CRI): made
# with `oci-checkpoint create --fallback cold`, it starts cold from its base
# image with the checkpointed container's own command and environment (the
# user's -e over it), through nerdctl and through CRI, and containerd says
# so in its log and an event (a foreground nerdctl run follows the cold
# start, containerd-patches/tasks-start-cold-when-the-runtime-fails-to-restore-a); made
# without, the run fails with the reason and leaves nothing.
#
# The host that "cannot restore" is this one: the image's recorded CPU flags
# get avx9000, a flag no CPU has, as a checkpoint taken on a newer CPU would
# record a flag this one lacks.

load helpers
load cri

setup_file() {
	need_built oci-checkpoint crictl
	cri_up
	load_image base
	load_image cpu-engine
}

teardown() {
	[ -n "${RK_DIR:-}" ] || return 0
	[ -n "${EVENTS_PID:-}" ] && kill "$EVENTS_PID" 2>/dev/null
	cri rmp --all --force >/dev/null 2>&1
	remove_containers
	true
}

teardown_file() {
	stack_down
}

# checkpoint_imported NS CONTAINER NAME [create flags...]: checkpoint
# CONTAINER (in containerd namespace NS) into an archive and import it as
# NAME into NS, unpacked, as a pull would leave it; with NEEDS_AVX9000 set,
# the image needs avx9000.
checkpoint_imported() {
	local ns=$1 ctr=$2 name=$3 tar=$BATS_TEST_TMPDIR/ckpt.tar
	shift 3
	run_cmd "$BIN/oci-checkpoint" -n "$ns" create "$@" --output "oci-archive:$tar" "$ctr" "$name"
	if [ -n "${NEEDS_AVX9000:-}" ]; then
		needs_avx9000 "$tar" "$BATS_TEST_TMPDIR/needs.tar" "$name"
		mv "$BATS_TEST_TMPDIR/needs.tar" "$tar"
	fi
	run_cmd "$BIN/ctr" --address "$RK_DIR/containerd.sock" -n "$ns" images import "$tar"
	rm -f "$tar"
}

# checkpoint_for_this_host_not NS CONTAINER NAME [create flags...]:
# checkpoint_imported, the image needing avx9000.
checkpoint_for_this_host_not() {
	NEEDS_AVX9000=1 checkpoint_imported "$@"
}

# events_up: `ctr events` into $BATS_TEST_TMPDIR/events, subscribed before
# this returns (an image tag's event has come through).
events_up() {
	EVENTS=$BATS_TEST_TMPDIR/events
	"$BIN/ctr" --address "$RK_DIR/containerd.sock" events >"$EVENTS" 2>&1 3>&- &
	EVENTS_PID=$!
	local c=("$BIN/ctr" --address "$RK_DIR/containerd.sock") probe=rekindle.local/events-probe:1 i
	for ((i = 0; i < 50; i++)); do
		"${c[@]}" images tag --force "$BASE_IMAGE" "$probe" >/dev/null
		"${c[@]}" images rm "$probe" >/dev/null
		grep -q "$probe" "$EVENTS" && return 0
		sleep 0.2
	done
	die "ctr events shows no event"
}

# fallback_event CONTAINER: the restore-fallback event of CONTAINER, as ctr
# events printed it (its JSON).
fallback_event() {
	wait_for "the restore-fallback event of $1" 10 grep -q "/tasks/restore-fallback.*\"$1\"" "$EVENTS"
	grep "/tasks/restore-fallback.*\"$1\"" "$EVENTS" | head -1 | sed 's|.*/tasks/restore-fallback ||'
}

# fell_back_cold ID IMAGE WHY REASON: containerd logged that restoring
# checkpoint IMAGE failed WHY (a grep pattern) and that it started cold from
# its base image, and task ID's restore-fallback event (left in EV) names
# IMAGE and gives REASON.
fell_back_cold() {
	logged "restoring checkpoint image $2 failed $3; starting cold from base image $ENGINE_IMAGE (fallback cold)"
	EV=$(fallback_event "$1")
	echo "event: $EV" >&2
	is "$(jq -r '.labels["checkpoint.image"]' <<<"$EV")" "$2" "event: the checkpoint image"
	[[ $(jq -r .labels.reasons <<<"$EV") == *"$4"* ]] || die "the event does not give the reason"
}

# started_cold PORT STARTED BEFORE: the engine on PORT was started anew
# (its start time is not STARTED) and gives BEFORE, its greedy output from
# before the checkpoint.
started_cold() {
	[ "$(state_of "$1" start_time)" != "$2" ] || die "the engine was restored, not started cold"
	is "$(engine POST "$1" /generate "$PROMPT" | jq -r .text)" "$3" "the cold engine's greedy output"
}

# cri_started_cold IMAGE: CRI container $CTR, made from checkpoint IMAGE,
# runs cold: no wake file, annotated as not restored, and CRI did not
# restore it.
cri_started_cold() {
	run_cmd 1 "$BIN/crictl" --config "$CRICTL_CONFIG" exec "$CTR" test -e /.rekindle/wake
	local info
	info=$(cri inspect "$CTR" 2>/dev/null)
	is "$(jq -r .status.state <<<"$info")" "CONTAINER_RUNNING" "cold container state"
	is "$(jq -r .status.annotations.restored <<<"$info")" "false" "restored annotation"
	is "$(jq -r .status.annotations.restoreFallback <<<"$info")" "cold" "restoreFallback annotation"
	is "$(jq -r .status.annotations.checkpointImage <<<"$info")" "$1" "checkpointImage annotation"
	! grep -q "Restored container $CTR successfully" "$RK_DIR/containerd.log" || die "CRI restored the container"
}

@test "nerdctl run: an image this host cannot restore, made with --fallback cold, starts cold from its base image" {
	local port image=rekindle.local/ckpt:fallback-cold
	port=$(free_port)
	start_engine fsrc "$port" -e ENGINE_TICK_MS=100 -e REKINDLE_SET_AT=checkpoint
	record_engine "$port"
	checkpoint_for_this_host_not default fsrc "$image" --fallback cold
	run_nerdctl rm -f fsrc

	run_cmd "$BIN/oci-checkpoint" inspect --json "$image"
	is "$(sed -n '/^{/,/^}/p' <<<"$output" | jq -r '.annotations["org.rekindle.restore.fallback"]')" "cold" "fallback annotation"
	run_cmd 1 "$BIN/oci-checkpoint" check "$image"
	[[ $output == *"lacks avx9000"* ]] || die "check does not name the missing flag"

	events_up
	port=$(free_port)
	run_nerdctl run -d --name fdst -e ENGINE_TICK_MS=50 -p "127.0.0.1:$port:30000" "$image"
	local id=$output
	wait_healthy "$port"
	# A fresh engine: started now, from the base image, not the restored one.
	started_cold "$port" "$E_START" "$E_TEXT"
	run_nerdctl 1 exec fdst test -e /.rekindle/wake
	# The checkpointed process's environment, with the user's -e over it.
	run_nerdctl exec fdst sh -c 'tr "\0" "\n" </proc/1/environ'
	is "$(grep '^ENGINE_TICK_MS=' <<<"$output")" "ENGINE_TICK_MS=50" "the user's -e over the checkpoint's value"
	is "$(grep '^REKINDLE_SET_AT=' <<<"$output")" "REKINDLE_SET_AT=checkpoint" "the checkpoint's own variable"

	fell_back_cold "$id" "$image" "preflight: this host's CPU lacks avx9000, which the checkpointed process may use" "lacks avx9000"
	is "$(jq -r .image <<<"$EV")" "$ENGINE_IMAGE" "event: the base image"
	is "$(jq -r .labels.fallback <<<"$EV")" "cold" "event: the fallback"
}

@test "nerdctl run: an image this host cannot restore, made without --fallback, fails with the reason and leaves nothing running" {
	local port image=rekindle.local/ckpt:fallback-none
	port=$(free_port)
	start_engine nsrc "$port"
	checkpoint_for_this_host_not default nsrc "$image"
	run_nerdctl rm -f nsrc

	run_cmd "$BIN/oci-checkpoint" inspect --json "$image"
	is "$(sed -n '/^{/,/^}/p' <<<"$output" | jq -r '.annotations["org.rekindle.restore.fallback"]')" "null" "no fallback annotation by default"
	run_cmd 1 "$BIN/oci-checkpoint" check "$image"
	[[ $output == *"lacks avx9000"* ]] || die "check does not name the missing flag"

	run_nerdctl '?' run -d --name ndst -p "127.0.0.1:$port:30000" "$image"
	[ "$status" -ne 0 ] || die "nerdctl run of an image this host cannot restore succeeded"
	[[ $output == *"cannot be restored on this host: this host's CPU lacks avx9000"* ]] || die "the error does not name the missing flag"
	[[ $output == *"org.rekindle.restore.fallback=cold"* ]] || die "the error does not say how to start cold"
	run_nerdctl ps -q --filter name=ndst
	is "$output" "" "no container running"
	! engine GET "$port" /health 2>/dev/null || die "an engine answers on port $port"
	! grep -q "restoring checkpoint image $image .*starting cold" "$RK_DIR/containerd.log" || die "containerd started it cold"
}

@test "crictl: an image this host cannot restore, made with --fallback cold, starts cold in its pod" {
	local port image=rekindle.local/ckpt:cri-fallback-cold
	port=$(free_port)
	run_engine_pod csrc "$ENGINE_IMAGE" "$port"
	wait_healthy "$port"
	record_engine "$port"
	checkpoint_for_this_host_not k8s.io "$CTR" "$image" --port "$port" --fallback cold
	cri_do rmp --force "$POD"

	events_up
	create_from_image cdst "$image" "$port"
	cri_do start "$CTR"
	wait_healthy "$port"
	started_cold "$port" "$E_START" "$E_TEXT"
	cri_started_cold "$image"
	fell_back_cold "$CTR" "$image" "preflight: this host's CPU lacks avx9000, which the checkpointed process may use" "lacks avx9000"
}

@test "crictl: an image this host cannot restore, made without --fallback, fails CreateContainer with the reason" {
	local port image=rekindle.local/ckpt:cri-fallback-none
	port=$(free_port)
	run_engine_pod xsrc "$ENGINE_IMAGE" "$port"
	wait_healthy "$port"
	checkpoint_for_this_host_not k8s.io "$CTR" "$image" --port "$port"
	cri_do rmp --force "$POD"

	local pod ctr err=$BATS_TEST_TMPDIR/create.err
	pod=$(pod_config xdst)
	ctr=$(engine_config "$image" "$port")
	cri_do runp "$pod"
	! cri create "$output" "$ctr" "$pod" 2>"$err" || die "crictl create of an image this host cannot restore succeeded"
	cat "$err" >&2
	grep -q "cannot be restored on this host: this host's CPU lacks avx9000" "$err" || die "the error does not name the missing flag"
	is "$(cri ps -a -q 2>/dev/null)" "" "no container created"
}

# break_criu_images IMAGE [NS]: remove fs-1.img from the CRIU images of
# checkpoint IMAGE (made with --compression zstd, so that the import
# extracts its layer: an uncompressed one is kept in place, read-only) in
# containerd namespace NS (default) where the restore reads them, in the
# image's snapshot, so that CRIU fails to restore it on a host that passes
# the preflight.
break_criu_images() {
	local layer dir ns=${2:-default}
	local c=("$BIN/ctr" --address "$RK_DIR/containerd.sock" -n "$ns")
	# The snapshot is named by the chain ID: for one layer, its diff ID.
	run_nerdctl --namespace "$ns" image inspect --mode native "$1"
	layer=$("${c[@]}" content get "$(jq -r '.[0].ImageConfigDesc.digest' <<<"$output")" | jq -r '.rootfs.diff_ids[0]')
	# The view's mounts come back from the call that makes it: the view
	# holds no lease, so containerd's garbage collector may take it at any
	# time after (a removal just before triggers a collection). Only the
	# path of the layer's snapshot is wanted; gone is as good as removed.
	run_cmd "${c[@]}" snapshots view --mounts fallback-break "$layer"
	dir=$(grep -o '/[^ "]*/snapshots/[0-9]*/fs' <<<"$output" | head -1)
	"${c[@]}" snapshots rm fallback-break >/dev/null 2>&1 ||
		! "${c[@]}" snapshots info fallback-break >/dev/null 2>&1 || die "cannot remove the view fallback-break"
	# fs-1.img (the root task's cwd and root) is one CRIU reads and runc's
	# privilege check does not, so CRIU is the one to fail.
	[ -f "$dir/checkpoint/fs-1.img" ] || die "no CRIU images of $1 in '$dir'"
	rm "$dir/checkpoint/fs-1.img"
}

@test "nerdctl run: a restore that CRIU fails, of an image made with --fallback cold, starts cold" {
	local port image=rekindle.local/ckpt:criu-fails-cold
	port=$(free_port)
	start_engine csrc "$port"
	record_engine "$port"
	checkpoint_imported default csrc "$image" --fallback cold --compression zstd
	run_nerdctl rm -f csrc
	run_cmd "$BIN/oci-checkpoint" check "$image"
	break_criu_images "$image"

	events_up
	port=$(free_port)
	run_nerdctl run -d --name cdst -p "127.0.0.1:$port:30000" "$image"
	local id=$output
	wait_healthy "$port"
	started_cold "$port" "$E_START" "$E_TEXT"
	run_nerdctl 1 exec cdst test -e /.rekindle/wake
	is "$(run_nerdctl inspect cdst; jq -r '.[0].State.Status' <<<"$output")" "running" "container state"

	fell_back_cold "$id" "$image" "in the runtime: the runtime failed to restore it: .*" "the runtime failed to restore it"
}

@test "nerdctl run in the foreground: a restore that CRIU fails, with --fallback cold, follows the cold start to its exit" {
	local port image=rekindle.local/ckpt:criu-fails-fg fg rc=0 out=$BATS_TEST_TMPDIR/fg.out
	port=$(free_port)
	start_engine fgsrc "$port"
	record_engine "$port"
	checkpoint_imported default fgsrc "$image" --fallback cold --compression zstd
	run_nerdctl rm -f fgsrc
	break_criu_images "$image"

	port=$(free_port)
	"$REKINDLE_ROOT/scripts/nerdctl.sh" "$RK_DIR" run --name fgdst -p "127.0.0.1:$port:30000" "$image" >"$out" 2>&1 &
	fg=$!
	wait_healthy "$port"
	started_cold "$port" "$E_START" "$E_TEXT"
	sleep 1
	kill -0 "$fg" 2>/dev/null || die "the foreground nerdctl run returned while its container runs cold: $(cat "$out")"

	run_nerdctl stop fgdst
	wait_for "the foreground nerdctl run to return" 30 gone "$fg"
	wait "$fg" || rc=$?
	echo "nerdctl run: exit $rc; output:" >&2
	cat "$out" >&2
	run_nerdctl inspect fgdst
	is "$rc" "$(sed -n '/^\[/,$p' <<<"$output" | jq -r '.[0].State.ExitCode')" "nerdctl run's exit status, the cold container's"
}

@test "nerdctl run: a restore that CRIU fails, of an image made without --fallback, fails" {
	local port image=rekindle.local/ckpt:criu-fails-none
	port=$(free_port)
	start_engine fnsrc "$port"
	checkpoint_imported default fnsrc "$image" --compression zstd
	run_nerdctl rm -f fnsrc
	break_criu_images "$image"

	run_nerdctl '?' run -d --name fndst -p "127.0.0.1:$port:30000" "$image"
	[ "$status" -ne 0 ] || die "nerdctl run of an image CRIU cannot restore succeeded"
	# runc says only "criu failed"; the shim adds CRIU's own error (containerd-patches/runc-shim-name-CRIU-s-errors-when-a-restore-fails).
	is "$output" "~CRIU: .+ \(criu/[a-z_-]+\.c:[0-9]+\) \(log: .*/restore\.log\)" "the error names what CRIU failed on, and its log"
	run_nerdctl ps -q --filter name=fndst
	is "$output" "" "no container running"
	! grep -q "restoring checkpoint image $image .*starting cold" "$RK_DIR/containerd.log" || die "containerd started it cold"
}

# rootfs_mounts ID: how many mounts this host has of task ID's root filesystem.
rootfs_mounts() {
	grep -c " [^ ]*/$1/rootfs " /proc/self/mountinfo || true
}

@test "crictl: a restore that CRIU fails, of an image made with --fallback cold, starts cold in its pod" {
	local port image=rekindle.local/ckpt:cri-criu-fails-cold
	port=$(free_port)
	run_engine_pod ksrc "$ENGINE_IMAGE" "$port"
	wait_healthy "$port"
	record_engine "$port"
	checkpoint_imported k8s.io "$CTR" "$image" --port "$port" --fallback cold --compression zstd
	cri_do rmp --force "$POD"
	run_cmd "$BIN/oci-checkpoint" -n k8s.io check "$image"
	break_criu_images "$image" k8s.io

	events_up
	create_from_image kdst "$image" "$port"
	cri_do start "$CTR"
	wait_healthy "$port"
	# A fresh engine on a fresh root filesystem: the rootfs diff that the
	# failed restore applied (with the wake file) is gone.
	started_cold "$port" "$E_START" "$E_TEXT"
	cri_started_cold "$image"
	fell_back_cold "$CTR" "$image" "in the runtime: the runtime failed to restore it: .*" "the runtime failed to restore it"
	is "$(jq -r .image <<<"$EV")" "$ENGINE_IMAGE" "event: the base image"

	# Nothing of the failed restore is left: one task, one root filesystem
	# mount, no hold on the extracted checkpoint; the pod's removal takes
	# the container's snapshot.
	is "$(k8s_ctr tasks ls -q | grep -c "^$CTR\$")" "1" "tasks of the container"
	is "$(rootfs_mounts "$CTR")" "1" "root filesystem mounts of the container"
	! k8s_ctr snapshots ls | grep -q "checkpoint-restore/$CTR" || die "a snapshot of the failed restore is left"
	cri_do rmp --force "$POD"
	is "$(rootfs_mounts "$CTR")" "0" "root filesystem mounts after the pod's removal"
	! k8s_ctr snapshots ls | grep -q "$CTR" || die "a snapshot of the container outlives its pod"
}

@test "crictl: a restore that CRIU fails, of an image made without --fallback, fails StartContainer and leaves nothing running" {
	local port image=rekindle.local/ckpt:cri-criu-fails-none
	port=$(free_port)
	run_engine_pod knsrc "$ENGINE_IMAGE" "$port"
	wait_healthy "$port"
	checkpoint_imported k8s.io "$CTR" "$image" --port "$port" --compression zstd
	cri_do rmp --force "$POD"
	break_criu_images "$image" k8s.io

	create_from_image kndst "$image" "$port"
	local err=$BATS_TEST_TMPDIR/start.err
	! cri start "$CTR" 2>"$err" || die "crictl start of a checkpoint that CRIU cannot restore succeeded"
	cat "$err" >&2
	grep -q "failed to restore containerd task" "$err" || die "the error is not the restore's"
	is "$(cri inspect "$CTR" 2>/dev/null | jq -r .status.state)" "CONTAINER_EXITED" "container state"
	! engine GET "$port" /health 2>/dev/null || die "an engine answers on port $port"
	! grep -q "restoring checkpoint image $image .*starting cold" "$RK_DIR/containerd.log" || die "containerd started it cold"
	is "$(k8s_ctr tasks ls -q | grep -c "^$CTR\$")" "0" "tasks of the container"
	is "$(rootfs_mounts "$CTR")" "0" "root filesystem mounts of the container"
}
