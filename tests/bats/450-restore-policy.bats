#!/usr/bin/env bats
# The host's restore policy (containerd-patches/checkpointimage-restore-only-the-checkpoint-images-t): containerd restores
# only the checkpoint images whose name matches a pattern of
# checkpoint_restore_images (the tasks service's option, which CRI reads
# too). A checkpoint image sets the restored process's credentials, so an
# image from elsewhere is refused, through nerdctl and through CRI, naming
# the image, the option and the fix, and leaves nothing; one made with
# --fallback cold starts cold from its base image instead, saying why. With
# the option empty, the Ansible role's default, no checkpoint image restores.
#
# The test configuration (scripts/containerd-config.sh) allows
# rekindle.local and the loopback registries; the images "from elsewhere"
# here are named elsewhere.example.com/..., made on this host all the same.
#
# The policy may also require a signature (checkpoint_restore_keys,
# checkpoint_restore_require_signature;
# containerd-patches/checkpointimage-restore-only-signed-checkpoint-image): with containerd restarted so, an
# image signed by oci-checkpoint with a listed key restores, and an
# unsigned one, or one whose manifest annotation changed after signing, is
# refused through nerdctl and CRI, naming the image and the option. The
# key pair is made with openssl, as docs/operations.md says.

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
	remove_containers
	# A test that restarted containerd with another policy gets the
	# file's back, also when it failed.
	if [ -e "$BATS_FILE_TMPDIR/other-policy" ]; then
		rm -f "$BATS_FILE_TMPDIR/other-policy"
		restart_containerd
	fi
	true
}

teardown_file() {
	stack_down
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
# configuration written afresh (CONTAINERD_RESTORE_IMAGES,
# CONTAINERD_RESTORE_KEYS and CONTAINERD_RESTORE_REQUIRE_SIGNATURE, as set,
# pick the policy). Images, containers and pods stay in its root.
restart_containerd() {
	HTTPS_PROXY=$OFFLINE_PROXY HTTP_PROXY=$OFFLINE_PROXY NO_PROXY= stack_restart
}

# require_signature: restart containerd requiring a signature by $KEYS/team.pub.
require_signature() {
	touch "$BATS_FILE_TMPDIR/other-policy"
	CONTAINERD_RESTORE_KEYS="[\"$KEYS/team.pub\"]" CONTAINERD_RESTORE_REQUIRE_SIGNATURE=true restart_containerd
	logged "checkpoint restore policy: checkpoint images restore when their name matches .* and they are signed by one of the keys \[sha256:[0-9a-f]* ($KEYS/team.pub)\]"
}

# rewrite_manifest IN.tar OUT.tar NAME unsigned|changed: the signed
# checkpoint image archive IN.tar as NAME, its signature removed, or kept
# with an annotation changed (the CPU flags a host is checked against
# dropped, as one would to pass the preflight).
rewrite_manifest() {
	oci_python - "$@" <<-'PY'
		import sys
		import oci_tar
		src, dst, name, how = sys.argv[1:5]
		index, a = oci_tar.read(src)
		desc = index["manifests"][0]
		man = a.get_json(desc["digest"])
		ann = man["annotations"]
		if "org.rekindle.signature" not in ann:
		    sys.exit(src + " is not signed")
		if how == "unsigned":
		    del ann["org.rekindle.signature"], ann["org.rekindle.signature.key"]
		else:
		    ann["org.rekindle.cpu.flags"] = ""
		desc.update(a.add_json(man))
		desc["annotations"] = oci_tar.image_name(name)
		a.write(dst, [desc])
	PY
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

@test "with checkpoint_restore_images empty (the Ansible role's default), no checkpoint image restores" {
	local port image=rekindle.local/ckpt:policy-default
	port=$(free_port)
	start_engine dsrc "$port"
	ocicp create --quiet dsrc "$image"
	run_nerdctl rm -f dsrc

	touch "$BATS_FILE_TMPDIR/other-policy"
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
}

@test "nerdctl run with a signature required: a signed checkpoint image restores; an unsigned one, and one whose annotation changed after signing, are refused naming the image and the option; nothing is left" {
	make_keys
	local port image=rekindle.local/ckpt:signed tar=$BATS_TEST_TMPDIR/signed.tar
	port=$(free_port)
	start_engine gsrc "$port"
	ocicp create --quiet --sign-key "$KEYS/team.key" --output "oci-archive:$tar" gsrc "$image"
	run_nerdctl rm -f gsrc
	rewrite_manifest "$tar" "$BATS_TEST_TMPDIR/unsigned.tar" rekindle.local/ckpt:unsigned unsigned
	rewrite_manifest "$tar" "$BATS_TEST_TMPDIR/changed.tar" rekindle.local/ckpt:changed changed
	local t
	for t in signed unsigned changed; do
		run_nerdctl load -i "$BATS_TEST_TMPDIR/$t.tar"
	done
	ocicp inspect "$image"
	[[ $output == *"Signed by:   key sha256:"* ]] || die "inspect does not show the signer"

	require_signature
	local ctr=("$BIN/ctr" --address "$RK_DIR/containerd.sock")
	for t in unsigned changed; do
		run_nerdctl '?' run -d --name "${t}dst" -p "127.0.0.1:$port:30000" "rekindle.local/ckpt:$t"
		[ "$status" -ne 0 ] || die "nerdctl run of the $t image succeeded"
		case $t in
		unsigned) refused_by_signature "$output" "rekindle.local/ckpt:$t" "the image is not signed (its manifest has no org.rekindle.signature annotation)" ;;
		changed) refused_by_signature "$output" "rekindle.local/ckpt:$t" "$KEYS/team.pub) does not verify: its manifest's descriptors or annotations changed after it was signed" ;;
		esac
		run_nerdctl ps -q --filter "name=${t}dst"
		is "$output" "" "no $t container running"
		is "$("${ctr[@]}" tasks ls -q 2>/dev/null)" "" "no task after the $t image"
		! engine GET "$port" /health 2>/dev/null || die "an engine answers on port $port"
	done

	# The signed one restores: the engine that was checkpointed answers.
	run_nerdctl run -d --name gdst -p "127.0.0.1:$port:30000" "$image"
	wait_for "the wake helper's status" 30 "$REKINDLE_ROOT/scripts/nerdctl.sh" "$RK_DIR" exec gdst cat /.rekindle/status
	wait_healthy "$port"
	! grep -q "restoring checkpoint image $image .*starting cold" "$RK_DIR/containerd.log" || die "containerd started it cold"
}

@test "crictl with a signature required: an unsigned checkpoint image fails CreateContainer naming the image and the option; signed with oci-checkpoint sign, it restores" {
	make_keys
	local port image=rekindle.local/ckpt:cri-unsigned
	port=$(free_port)
	run_engine_pod ssrc "$ENGINE_IMAGE" "$port"
	wait_healthy "$port"
	run_cmd "$BIN/oci-checkpoint" -n k8s.io create --port "$port" \
		--output "oci-archive:$BATS_TEST_TMPDIR/image.tar" "$CTR" "$image"
	cri_do rmp --force "$POD"
	k8s_ctr images import "$BATS_TEST_TMPDIR/image.tar" >/dev/null 2>&1 || die "cannot import $image"

	require_signature
	local pod ctr err=$BATS_TEST_TMPDIR/create.err
	pod=$(pod_config sdst)
	ctr=$(engine_config "$image" "$port")
	cri_do runp "$pod"
	local podid=$output
	! cri create "$podid" "$ctr" "$pod" 2>"$err" || die "crictl create of an unsigned checkpoint image succeeded"
	cat "$err" >&2
	refused_by_signature "$(cat "$err")" "$image" "the image is not signed"
	is "$(cri ps -a -q 2>/dev/null)" "" "no container created"
	! engine GET "$port" /health 2>/dev/null || die "an engine answers on port $port"

	# Signed where it is (its digest changes, its ID does not), it restores.
	local before
	before=$(k8s_ctr images ls | awk -v n="$image" '$1 == n {print $3}')
	run_cmd "$BIN/oci-checkpoint" -n k8s.io sign --key "$KEYS/team.key" "$image"
	[[ $output == *"==> signed $image with key sha256:"* && $output == *"its digest is now sha256:"*"(was $before)"* ]] ||
		die "sign does not say what it did"
	[ "$(k8s_ctr images ls | awk -v n="$image" '$1 == n {print $3}')" != "$before" ] || die "the image's digest did not change"
	cri_do create "$podid" "$ctr" "$pod"
	cri_do start "$output"
	wait_healthy "$port"
}
