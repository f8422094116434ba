#!/usr/bin/env bats
# Bounds on a hostile image's restore (issue 46): the pages images of a
# `--compression pages` checkpoint decode only within the container's
# memory limit (containerd-patches/runc-shim-bound-the-decoded-pages-images-by-the-cont),
# and a restore that outlasts checkpoint_restore_timeout is killed, leaving
# nothing behind (containerd-patches/runc-shim-kill-a-restore-that-outlasts-checkpoint_re).

load helpers

setup_file() {
	need_built oci-checkpoint
	stack_up
	load_image base
	load_image cpu-engine
	export CONTAINERD_ADDRESS=$RK_DIR/containerd.sock
}

teardown() {
	[ -z "${RK_DIR:-}" ] || remove_containers
}

teardown_file() {
	stack_down
}

runc_() { "$BIN/runc" --root "$RK_DIR/runc/default" "$@"; }

# left_behind ID: what a failed restore of container ID left: a runc
# container, a CRIU process of this stack, a mount or cgroup of ID.
left_behind() {
	local id=$1 pid
	runc_ list -q | grep -x "$id" && echo "runc container $id"
	for pid in $(pgrep -x criu); do
		# Other stacks may be restoring: only ours, whose files are under RK_DIR.
		if ls -l "/proc/$pid/cwd" "/proc/$pid/fd" 2>/dev/null | grep -q "$RK_DIR"; then
			echo "criu process $pid"
		fi
	done
	grep -E "criu-root|criu-pages" /proc/self/mountinfo | grep -F "$id" && echo "mounts of $id"
	find /sys/fs/cgroup -maxdepth 4 -type d -name "*$id*" 2>/dev/null | sed 's/^/cgroup /'
	return 0
}

@test "nerdctl run --memory: a checkpoint image whose pages images decode beyond the container's memory limit is refused, naming the limit, leaving nothing" {
	local port image=rekindle.local/ckpt:bounds-pages id
	port=$(free_port)
	start_engine src "$port"
	ocicp create -q --compression pages src "$image"
	run_nerdctl rm -f src

	# Within the limit it restores; the log says how much its pages took.
	port=$(free_port)
	run_nerdctl run -d --name big --memory 1g -p "127.0.0.1:$port:30000" "$image"
	wait_healthy "$port"
	run_nerdctl rm -f big
	local decoded limit
	decoded=$(grep -o 'decoded [0-9]* compressed pages images, [0-9]* MiB' "$RK_DIR/containerd.log" | tail -1 | awk '{print $6}')
	[ -n "$decoded" ] || die "containerd did not log the decode"
	limit=$((decoded / 2 + 1))

	run_nerdctl 1 run -d --name small --memory "${limit}m" -p "127.0.0.1:$(free_port):30000" "$image"
	[[ $output == *"restore from checkpoint image $image"* ]] || die "the error does not name the image: $output"
	[[ $output == *"once their pages are decoded, more than the ${limit}MiB ($((limit << 20)) bytes) of the container's memory limit (linux.resources.memory.limit)"* ]] ||
		die "the error does not name the decoded size, the bound and the limit: $output"
	[[ $output == *"pages-"*".img.zst"* ]] || die "the error does not name a pages image: $output"
	id=$("$REKINDLE_ROOT/scripts/nerdctl.sh" "$RK_DIR" inspect --format '{{.ID}}' small 2>/dev/null || true)
	run_ctr task ls
	! grep -q RUNNING <<<"$output" || die "a task runs after a refused restore: $output"
	[ -z "$id" ] || is "$(left_behind "$id")" "" "what the refused restore left"
}

@test "a restore that outlasts checkpoint_restore_timeout is killed and fails naming the option, leaving nothing" {
	local port image=rekindle.local/ckpt:bounds-deadline id
	port=$(free_port)
	start_engine dsrc "$port"
	ocicp create -q dsrc "$image"
	run_nerdctl rm -f dsrc

	CONTAINERD_RESTORE_TIMEOUT=1ms stack_restart
	run_nerdctl 1 run -d --name late -p "127.0.0.1:$(free_port):30000" "$image"
	grep -E "restore did not finish|failed to delete container" "$RK_DIR/containerd.log" >&2 || true
	[[ $output == *"did not finish within 1ms (checkpoint_restore_timeout in [plugins.'io.containerd.service.v1.tasks-service'])"* ]] ||
		die "the error does not name the deadline and the option: $output"
	id=$("$REKINDLE_ROOT/scripts/nerdctl.sh" "$RK_DIR" inspect --format '{{.ID}}' late 2>/dev/null || true)
	run_ctr task ls
	! grep -q RUNNING <<<"$output" || die "a task runs after a restore past its deadline: $output"
	[ -z "$id" ] || is "$(left_behind "$id")" "" "what the killed restore left"

	# The default deadline restores it.
	stack_restart
	port=$(free_port)
	run_nerdctl run -d --name intime -p "127.0.0.1:$port:30000" "$image"
	wait_healthy "$port"
}
