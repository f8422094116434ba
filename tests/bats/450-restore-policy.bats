#!/usr/bin/env bats
# The host's restore policy (containerd-patches/0023): containerd restores
# only the checkpoint images whose name matches a pattern of
# checkpoint_restore_images (the tasks service's option, which CRI reads
# too). A checkpoint image sets the restored process's credentials, so an
# image from elsewhere is refused, through nerdctl and through CRI, naming
# the image, the option and the fix, and leaves nothing; one made with
# --fallback cold starts cold from its base image instead, saying why. With
# the option unset, containerd's default, no checkpoint image restores.
#
# The test configuration (scripts/containerd-config.sh) allows
# rekindle.local and the loopback registries; the images "from elsewhere"
# here are named elsewhere.example.com/..., made on this host all the same.

load helpers
load cri

OUTSIDE=elsewhere.example.com/ckpt

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
	local n=("$REKINDLE_ROOT/scripts/nerdctl.sh" "$RK_DIR") c
	for c in $("${n[@]}" ps -aq 2>/dev/null); do
		"${n[@]}" rm -f "$c" >/dev/null 2>&1 || true
	done
	true
}

teardown_file() {
	stack_down
}

# refused_by_policy OUTPUT NAME: OUTPUT is the policy's error for checkpoint
# image NAME (normalized: no tag), naming the option and the fix.
refused_by_policy() {
	local out=${1//\\\"/\"} name=$2 # logrus and klog escape the quotes
	[[ $out == *"may not be restored on this host"* ]] || die "the error does not say the image may not be restored"
	[[ $out == *"checkpoint_restore_images in [plugins.'io.containerd.service.v1.tasks-service']"* ]] ||
		die "the error does not name the option"
	[[ $out == *"\"$name\""*"matches none of its patterns"* ]] || die "the error does not name the image $name"
	[[ $out == *"add \"$name\", or a pattern that matches it"* ]] || die "the error does not give the fix"
}

# events_up: `ctr events` into $BATS_TEST_TMPDIR/events, subscribed before
# this returns (an image tag's event has come through).
events_up() {
	local c=("$BIN/ctr" --address "$RK_DIR/containerd.sock") probe=rekindle.local/events-probe:1 i
	"${c[@]}" events >"$BATS_TEST_TMPDIR/events" 2>&1 3>&- &
	EVENTS_PID=$!
	for ((i = 0; i < 50; i++)); do
		"${c[@]}" images tag --force "$BASE_IMAGE" "$probe" >/dev/null
		"${c[@]}" images rm "$probe" >/dev/null
		grep -q "$probe" "$BATS_TEST_TMPDIR/events" && return 0
		sleep 0.2
	done
	die "ctr events shows no event"
}

# restart_containerd: stop the file's containerd and start it again with a
# configuration written afresh (CONTAINERD_RESTORE_IMAGES, as set, picks the
# policy). Images, containers and pods stay in its root.
restart_containerd() {
	local pid
	pid=$(cat "$RK_DIR/containerd.pid")
	kill -TERM "$pid"
	wait_for "containerd $pid to stop" 20 gone "$pid"
	HTTPS_PROXY=$OFFLINE_PROXY HTTP_PROXY=$OFFLINE_PROXY NO_PROXY= stack_up
}

@test "nerdctl run: a checkpoint image outside the host's policy is refused, naming the image, the option and the fix; nothing is left" {
	local port image=$OUTSIDE:refused
	port=$(free_port)
	start_engine psrc "$port"
	ocicp create --quiet psrc "$image"
	run_nerdctl rm -f psrc

	run_nerdctl '?' run -d --name pdst -p "127.0.0.1:$port:30000" "$image"
	[ "$status" -ne 0 ] || die "nerdctl run of a checkpoint image outside the policy succeeded"
	refused_by_policy "$output" "$OUTSIDE"
	[[ ${output//\\\"/\"} == *'it holds ["rekindle.local", "127.0.0.1:*"]'* ]] || die "the error does not say what the option holds"
	run_nerdctl ps -q --filter name=pdst
	is "$output" "" "no container running"
	is "$("$BIN/ctr" --address "$RK_DIR/containerd.sock" tasks ls -q 2>/dev/null)" "" "no task"
	! engine GET "$port" /health 2>/dev/null || die "an engine answers on port $port"
	! grep -q "restoring checkpoint image $image .*starting cold" "$RK_DIR/containerd.log" || die "containerd started it cold"

	# The same checkpoint under an allowed name restores.
	run_nerdctl tag "$image" rekindle.local/ckpt:policy-allowed
	run_nerdctl run -d --name pdst2 -p "127.0.0.1:$port:30000" rekindle.local/ckpt:policy-allowed
	wait_for "the wake helper's status" 30 "$REKINDLE_ROOT/scripts/nerdctl.sh" "$RK_DIR" exec pdst2 cat /.rekindle/status
}

@test "crictl: a checkpoint image outside the host's policy fails CreateContainer with the reason; nothing is created" {
	local port image=$OUTSIDE:cri-refused
	port=$(free_port)
	run_engine_pod xsrc "$ENGINE_IMAGE" "$port"
	wait_healthy "$port"
	run_cmd "$BIN/oci-checkpoint" -n k8s.io create --port "$port" \
		--output "oci-archive:$BATS_TEST_TMPDIR/image.tar" "$CTR" "$image"
	cri_do rmp --force "$POD"
	k8s_ctr images import "$BATS_TEST_TMPDIR/image.tar" >/dev/null 2>&1 || die "cannot import $image"

	local pod ctr err=$BATS_TEST_TMPDIR/create.err
	pod=$(pod_config xdst)
	ctr=$(engine_config "$image" "$port")
	cri_do runp "$pod"
	local podid=$output
	! cri create "$podid" "$ctr" "$pod" 2>"$err" || die "crictl create of a checkpoint image outside the policy succeeded"
	cat "$err" >&2
	refused_by_policy "$(cat "$err")" "$OUTSIDE"
	is "$(cri ps -a -q 2>/dev/null)" "" "no container created"
	! engine GET "$port" /health 2>/dev/null || die "an engine answers on port $port"

	# As a kubelet asks, by the image's ID: the names it has are matched.
	local id
	id=$(cri inspecti "$image" 2>/dev/null | jq -r .status.id)
	ctr=$(engine_config "$id" "$port")
	! cri create "$podid" "$ctr" "$pod" 2>"$err" || die "crictl create by the image's ID succeeded"
	refused_by_policy "$(cat "$err")" "$OUTSIDE"
	is "$(cri ps -a -q 2>/dev/null)" "" "no container created"
}

@test "nerdctl run: a checkpoint image outside the host's policy, made with --fallback cold, starts cold from its base image, saying why" {
	local port image=$OUTSIDE:cold
	port=$(free_port)
	start_engine csrc "$port"
	record_engine "$port"
	ocicp create --quiet --fallback cold csrc "$image"
	run_nerdctl rm -f csrc

	events_up
	port=$(free_port)
	run_nerdctl run -d --name cdst -p "127.0.0.1:$port:30000" "$image"
	local id=$output
	wait_healthy "$port"
	[ "$(state_of "$port" start_time)" != "$E_START" ] || die "the engine was restored, not started cold"
	is "$(engine POST "$port" /generate "$PROMPT" | jq -r .text)" "$E_TEXT" "the cold engine's greedy output"
	run_nerdctl 1 exec cdst test -e /.rekindle/wake
	logged "restoring checkpoint image $image failed preflight: this host restores only the checkpoint images that checkpoint_restore_images .* allows, and .*$OUTSIDE.* matches none of its patterns .*; starting cold from base image $ENGINE_IMAGE (fallback cold)"
	wait_for "the restore-fallback event" 10 grep -q "/tasks/restore-fallback.*\"$id\"" "$BATS_TEST_TMPDIR/events"
	local ev
	ev=$(grep "/tasks/restore-fallback.*\"$id\"" "$BATS_TEST_TMPDIR/events" | head -1 | sed 's|.*/tasks/restore-fallback ||')
	echo "event: $ev" >&2
	is "$(jq -r '.labels["checkpoint.image"]' <<<"$ev")" "$image" "event: the checkpoint image"
	[[ $(jq -r .labels.reasons <<<"$ev") == *"checkpoint_restore_images"* ]] || die "the event does not give the reason"
}

@test "with checkpoint_restore_images unset (containerd's default), no checkpoint image restores" {
	local port image=rekindle.local/ckpt:policy-default
	port=$(free_port)
	start_engine dsrc "$port"
	ocicp create --quiet dsrc "$image"
	run_nerdctl rm -f dsrc

	CONTAINERD_RESTORE_IMAGES= restart_containerd
	logged "checkpoint restore policy: no checkpoint image restores (checkpoint_restore_images in .* is empty)"
	run_nerdctl '?' run -d --name ddst -p "127.0.0.1:$port:30000" "$image"
	[ "$status" -ne 0 ] || die "nerdctl run of a checkpoint image with no policy succeeded"
	refused_by_policy "$output" rekindle.local/ckpt
	[[ $output == *"it is empty, so no checkpoint image restores"* ]] || die "the error does not say the option is empty"
	run_nerdctl ps -q --filter name=ddst
	is "$output" "" "no container running"

	# A plain image still runs.
	run_nerdctl run --rm "$BASE_IMAGE" true
	restart_containerd
}
