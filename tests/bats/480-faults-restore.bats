#!/usr/bin/env bats
# Faults on the restore path (issue 61): a CRIU killed at a phase of the
# restore (runc-patches/libct-criu-fail-a-restore-at-once-when-CRIU-dies-and),
# its runc or its shim killed (issue 61, item 5),
# a restore that outlasts checkpoint_restore_timeout with a published port
# (rekindle.local/restore/shim's kill loop spares runc's cleanup hook), and
# a failed `nerdctl run` of a checkpoint image (containerd-patches/tasks-start-cold-when-the-runtime-fails-to-restore-a
# deletes its task: no shim or logger stays beside the Created container
# nerdctl leaves): each fails at once, naming its cause, and once nerdctl
# has removed the container the host holds nothing of it (faults.bash, assert_nothing_left: no process, cgroup,
# mount, port, CNI address, snapshot or lease).

load helpers
load faults

IMAGE=rekindle.local/ckpt:faults

setup_file() {
	need_built oci-checkpoint
	stack_up
	export CONTAINERD_ADDRESS=$RK_DIR/containerd.sock
	load_image base
	load_image cpu-engine
	local port
	port=$(free_port)
	# State to restore, so that the memory fill lasts long enough for a
	# runc killed in it to be killed before the restore ends.
	start_engine fsrc "$port" -e "ENGINE_STATE_MB=${FAULTS_IMAGE_STATE_MB:-256}"
	record_engine "$port"
	echo "$E_TEXT" >"$BATS_FILE_TMPDIR/text"
	ocicp create -q fsrc "$IMAGE"
	run_nerdctl rm -f fsrc
}

teardown() {
	[ -n "${RK_DIR:-}" ] || return 0
	[ -z "${RUN_PID:-}" ] || kill "$RUN_PID" 2>/dev/null || true
	remove_containers
}

teardown_file() {
	stack_down
}

# run_bg NAME PORT: `nerdctl run -d` of the checkpoint image as NAME,
# published on 127.0.0.1:PORT, in the background (its output in RUN_OUT,
# its pid in RUN_PID), after the mark file MARK is touched.
run_bg() {
	MARK=$BATS_TEST_TMPDIR/mark RUN_OUT=$BATS_TEST_TMPDIR/run.out
	touch "$MARK"
	sleep 0.01
	"$REKINDLE_ROOT/scripts/nerdctl.sh" "$RK_DIR" run -d --name "$1" -p "127.0.0.1:$2:30000" "$IMAGE" >"$RUN_OUT" 2>&1 3>&- &
	RUN_PID=$!
}

# run_ends SECONDS: the background nerdctl run ends within SECONDS; its
# status in RUN_STATUS, its output printed.
run_ends() {
	local i
	for ((i = 0; i < $1 * 5; i++)); do
		gone "$RUN_PID" && break
		sleep 0.2
	done
	if ! gone "$RUN_PID"; then
		sed 's/^/  /' "$RUN_OUT" >&2
		die "nerdctl run did not end within $1 s"
	fi
	RUN_STATUS=0
	wait "$RUN_PID" || RUN_STATUS=$?
	RUN_PID=
	echo "nerdctl run exited $RUN_STATUS:" >&2
	sed 's/^/  /' "$RUN_OUT" >&2
}

# removed NAME: `nerdctl rm -f NAME` ends within 60 s and exits 0 (or NAME
# is not there at all).
removed() {
	run_cmd '?' timeout 60 "$REKINDLE_ROOT/scripts/nerdctl.sh" "$RK_DIR" rm -f "$1"
	[ "$status" -ne 124 ] || die "nerdctl rm -f $1 hung"
	[ "$status" -eq 0 ] || [[ $output == *"no such container"* ]] || die "nerdctl rm -f $1 failed"
}

# restores_again: the same image restores on a new port afterwards and
# answers as before the checkpoint.
restores_again() {
	local port
	port=$(free_port)
	run_nerdctl run -d --name again -p "127.0.0.1:$port:30000" "$IMAGE"
	wait_healthy "$port"
	is "$(engine POST "$port" /generate "$PROMPT" | jq -r .text)" "$(cat "$BATS_FILE_TMPDIR/text")" "the next restore's greedy output"
	run_nerdctl rm -f again
}

# no_task_left NAME PORT ID: before nerdctl rm, a failed run leaves at most
# the Created container nerdctl made (its record, its snapshot): no task,
# shim, logger, process, port or CNI address of it.
no_task_left() {
	local left i
	for ((i = 0; i < 25; i++)); do
		left=$(what_is_left "$@" | grep -Ev "^(container $1 Created$|containerd container |snapshot |lease )" || true)
		[ -n "$left" ] || break
		sleep 0.2
	done
	echo "left before nerdctl rm: $(what_is_left "$@")" >&2
	is "$left" "" "what the failed run of $1 left but its Created container"
}

# killed_at NAME PATTERN: kill -9 the CRIU of a restore of NAME when its log
# shows PATTERN; the run fails at once naming CRIU's death, and after rm -f
# nothing is left.
killed_at() {
	local name=$1 pattern=$2 port id pid
	port=$(free_port)
	run_bg "$name" "$port"
	pid=$(signal_criu_at "$MARK" "$pattern" KILL) || die "CRIU was not killed"
	id=$(container_id "$name")
	run_ends 60
	[ "$RUN_STATUS" -ne 0 ] || die "nerdctl run succeeded with its CRIU killed"
	grep -Eq "criu \(pid $pid\) died, killed by signal 9 \(SIGKILL\)" "$RUN_OUT" ||
		die "the error does not say that CRIU (pid $pid) was killed"
	! grep -q "cgroupd: recv req error" "$RUN_OUT" || die "the error names the cgroup daemon, an effect"
	grep -q "its task is removed; the container $id is left, as after any failed start: nerdctl rm removes it" "$RUN_OUT" ||
		die "the error does not say that the container is left"
	no_task_left "$name" "$port" "$id"
	removed "$name"
	assert_nothing_left "$name" "$port" "$id"
	restores_again
}

@test "CRIU killed before the memory fill: nerdctl run fails at once naming CRIU's death, rm -f leaves nothing" {
	killed_at early 'Forking task with'
}

# The restorer's helpers fill the tasks' memory once they switch to it.
@test "CRIU killed during the memory fill: nerdctl run fails at once naming CRIU's death, rm -f leaves nothing" {
	killed_at filling 'Restore via sigreturn'
}

# runtime_killed_at TARGET NAME PATTERN: SIGKILL the restore's TARGET (runc:
# its `runc restore`; shim: the container's containerd-shim-runc-v2, and
# with it runc, its parent-death signal) once CRIU's log shows PATTERN.
# The run fails at once naming what died and the container; after rm -f
# nothing is left (runc-patches/libct-criu-save-a-restore-s-state-before-CRIU-runs-s:
# runc delete finds the container and undoes the restore, its poststop
# hook freeing the port and the address, once the createRuntime hook that
# runc left running is done: runc-patches/libct-criu-let-delete-wait-for-the-hooks-of-a-restor;
# containerd-patches/runc-shim-delete-a-container-whose-restore-failed-by:
# the shim deletes with --force a restore that CRIU finished without runc;
# containerd-patches/runc-shim-end-the-logging-binary-when-the-shim-dies).
runtime_killed_at() {
	local target=$1 name=$2 pattern=$3 port id pid= log end=$((SECONDS + 60))
	port=$(free_port)
	run_bg "$name" "$port"
	# CRIU's log is in the task's work dir, at a known path: find(1) over
	# the stack or nerdctl inspect is slow enough that a short restore
	# could end before either answers.
	log=$(restore_log_of_run "$MARK" 60) || die "no restore of $name began"
	id=$(basename "$(dirname "$log")")
	case $target in
	runc) pid=$(runc_restoring "$id" | head -1) ;;
	shim) pid=$(shim_of "$id" | head -1) ;;
	esac
	[ -n "$pid" ] || die "no $target of the restore of $name ($id) runs; CRIU's log: $(tail -3 "$log")"
	# A tight loop: a phase may last a fraction of a second.
	while [ "$SECONDS" -lt "$end" ] && ! grep -Eq -- "$pattern" "$log" 2>/dev/null; do :; done
	grep -Eq -- "$pattern" "$log" || die "CRIU's log ($log) never showed '$pattern'"
	# Killed after runc returned, the shim would have answered already:
	# then the case did not happen, which is no result.
	[ -n "$(runc_restoring "$id")" ] || die "the restore had ended when its log showed '$pattern' (timing; CRIU's log: $(tail -1 "$log"))"
	kill -KILL "$pid" || die "the $target ($pid) was gone before '$pattern'"
	run_ends 60
	[ "$RUN_STATUS" -ne 0 ] || die "nerdctl run succeeded with its $target killed"
	case $target in
	runc) grep -q "runc restore of container $id was killed by signal 9 (SIGKILL) before it finished" "$RUN_OUT" ||
		die "the error does not name runc's death and the container" ;;
	shim) grep -q "the runtime shim of task $id exited before it answered the task's start" "$RUN_OUT" ||
		die "the error does not name the shim's death and the container" ;;
	esac
	removed "$name"
	assert_nothing_left "$name" "$port" "$id"
	restores_again
}

@test "runc killed once CRIU forks the tasks: nerdctl run names runc's death, rm -f leaves nothing" {
	runtime_killed_at runc runc-early 'Forking task with'
}

@test "runc killed during the memory fill: nerdctl run names runc's death, rm -f leaves nothing" {
	runtime_killed_at runc runc-filling 'Restore via sigreturn'
}

@test "the shim killed once CRIU forks the tasks: nerdctl run names the shim's death, rm -f leaves nothing" {
	runtime_killed_at shim shim-early 'Forking task with'
}

@test "the shim killed during the memory fill: nerdctl run names the shim's death, rm -f leaves nothing" {
	runtime_killed_at shim shim-filling 'Restore via sigreturn'
}

@test "a restore with -p past checkpoint_restore_timeout frees its port and address: the same port restores again" {
	CONTAINERD_RESTORE_TIMEOUT=3s stack_restart
	local port id
	port=$(free_port)
	run_bg late "$port"
	# A stopped CRIU never finishes: the deadline must end it.
	signal_criu_at "$MARK" 'Forking task with' STOP >/dev/null || die "CRIU was not stopped"
	id=$(container_id late)
	run_ends 60
	[ "$RUN_STATUS" -ne 0 ] || die "nerdctl run succeeded past its deadline"
	grep -q "did not finish within 3s (checkpoint_restore_timeout" "$RUN_OUT" || die "the error does not name the deadline"
	! grep -q "error running poststop hook" "$RUN_OUT" "$RK_DIR/containerd.log" || die "runc's poststop hook failed (killed?)"
	removed late
	assert_nothing_left late "$port" "$id"

	# The same port again, with the default deadline.
	stack_restart
	run_nerdctl run -d --name late2 -p "127.0.0.1:$port:30000" "$IMAGE"
	wait_healthy "$port"
	run_nerdctl rm -f late2
	assert_nothing_left late2 "$port" ""
}
