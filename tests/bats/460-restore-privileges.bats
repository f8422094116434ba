#!/usr/bin/env bats
# A restore gives the restored process no more than the new container's spec
# grants (guard/check/privileges.go, guard/check/lsm.go, guard/check/apparmor.go, guard/check/limits.go and guard/check/oom.go): CRIU takes ids, capabilities,
# no_new_privs, seccomp filters, the LSM label, resource limits, scheduling
# and oom_score_adj from the checkpoint, so runc compares them with the spec
# first. An image that asks for more is refused with the task and the field
# named, and nothing is left running.

load helpers

setup_file() {
	need_built oci-checkpoint
	stack_up
	load_image base
	load_image cpu-engine
	export CONTAINERD_ADDRESS=$RK_DIR/containerd.sock
}

teardown() {
	[ -n "${RK_DIR:-}" ] || return 0
	remove_containers
}

teardown_file() {
	stack_down
}

# checkpoint_engine IMAGE [RUN FLAGS...]: an engine started with RUN FLAGS,
# checkpointed by oci-checkpoint into the local image IMAGE.
checkpoint_engine() {
	local image=$1 port
	shift
	port=$(free_port)
	start_engine src "$port" "$@"
	answered "before the checkpoint" "$(engine POST "$port" /generate "$PROMPT" | jq -r .text)"
	ocicp create -q src "$image"
	run_nerdctl rm -f src
}

# refused NAME WHAT [RUN FLAGS...]: nerdctl run of the image in IMAGE, with
# RUN FLAGS, fails naming WHAT, and leaves no task.
refused() {
	local name=$1 what=$2
	shift 2
	run_nerdctl 1 run -d --name "$name" "$@" "$IMAGE"
	[[ $output == *"refusing to restore: checkpoint task 1 "*"$what"* ]] ||
		die "the error does not name '$what': $output"
	run_ctr task ls
	! grep -q RUNNING <<<"$output" || die "a task runs after a refused restore: $output"
}

status_of() {
	"$REKINDLE_ROOT/scripts/nerdctl.sh" "$RK_DIR" exec "$1" cat /.rekindle/status 2>/dev/null
}

# restores NAME [RUN FLAGS...]: nerdctl run of IMAGE with RUN FLAGS restores
# the engine, and the wake helper, run as the container's process runs,
# resumes it.
restores() {
	local name=$1 port
	shift
	port=$(free_port)
	run_nerdctl run -d --name "$name" -p "127.0.0.1:$port:30000" "$@" "$IMAGE"
	wait_for "the wake helper's status" 30 status_of "$name"
	is "$(status_of "$name" | jq -r .outcome)" "resumed" "helper outcome"
	answered "after the restore" "$(engine POST "$port" /generate "$PROMPT" | jq -r .text)"
	grep -q "restored from checkpoint image $IMAGE: container-setup=" "$RK_DIR/containerd.log" ||
		die "containerd logged no restore of $IMAGE"
}

@test "nerdctl: a restore with fewer capabilities, another user or no_new_privs than the checkpoint is refused" {
	IMAGE=rekindle.local/ckpt:privileges
	checkpoint_engine "$IMAGE"

	refused p1 "cap_prm has CAP_CHOWN" --cap-drop ALL -p "127.0.0.1:$(free_port):30000"
	refused p2 "cap_prm has CAP_NET_RAW, beyond the config's permitted capabilities" --cap-drop NET_RAW
	refused p3 "no_new_privs is off, the config sets noNewPrivileges" --security-opt no-new-privileges
	refused p5 "uid is 0, the config's user is 1000" --user 1000:1000 --cap-drop ALL
	# The same spec as the checkpointed container's restores, the helper
	# included: it ran with the container's capabilities, not CAP_NET_ADMIN.
	restores p4
}

@test "nerdctl: a checkpoint taken without seccomp restores only where the spec has none either" {
	IMAGE=rekindle.local/ckpt:unconfined
	checkpoint_engine "$IMAGE" --security-opt seccomp=unconfined

	refused s1 "has no seccomp filter, the config sets a seccomp profile"
	restores s2 --security-opt seccomp=unconfined
}

@test "nerdctl: a checkpoint under another seccomp profile is refused" {
	IMAGE=rekindle.local/ckpt:seccomp
	local profile=$BATS_TEST_TMPDIR/profile.json
	# Docker's default profile's shape, shortened: everything allowed but
	# one call the engine never makes.
	jq -n '{defaultAction: "SCMP_ACT_ALLOW", syscalls: [{names: ["acct"], action: "SCMP_ACT_ERRNO"}]}' >"$profile"
	checkpoint_engine "$IMAGE" --security-opt "seccomp=$profile"

	refused c1 "seccomp filters do not include the program of the config's seccomp profile"
	restores c2 --security-opt "seccomp=$profile"
}

@test "nerdctl: a restore holds the checkpoint's hard limits and oom_score_adj to the spec's" {
	IMAGE=rekindle.local/ckpt:limits
	checkpoint_engine "$IMAGE" --ulimit nofile=4096:4096 --oom-score-adj 100

	# CRIU sets the checkpoint's 4096 and 100; runc lowers the one and
	# raises the other to the spec's before the engine resumes, as a start
	# of this spec would have them.
	restores l1 --ulimit nofile=1024:1024 --oom-score-adj 500
	run_nerdctl inspect -f '{{.State.Pid}}' l1
	local pid=$output
	is "$(cat "/proc/$pid/oom_score_adj")" 500 "the restored engine's oom_score_adj"
	is "$(awk '/^Max open files/ {print $5}' "/proc/$pid/limits")" 1024 "the restored engine's hard RLIMIT_NOFILE"
	is "$(awk '/^Max open files/ {print $4}' "/proc/$pid/limits")" 1024 "the restored engine's soft RLIMIT_NOFILE"
}
