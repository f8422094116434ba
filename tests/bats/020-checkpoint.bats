#!/usr/bin/env bats
# CRIU works end to end on this kernel through the stack's own tools:
# nerdctl checkpoint create, then nerdctl start --checkpoint, which leaves
# no copy of the checkpoint behind.

load helpers

setup_file() {
	stack_up
	load_image base
	load_image cpu-engine
}

teardown_file() {
	stack_down
}

# extracted_checkpoints: the ctrd-checkpoint* directories where this
# stack's containerd extracts the checkpoint of a `nerdctl start
# --checkpoint` (os.MkdirTemp of its $XDG_RUNTIME_DIR, else $TMPDIR, else
# /tmp), as its environment has them.
extracted_checkpoints() {
	local env dir
	env=$(tr '\0' '\n' <"/proc/$(cat "$RK_DIR/containerd.pid")/environ") ||
		die "cannot read the environment of the stack's containerd"
	dir=$(sed -n 's/^XDG_RUNTIME_DIR=//p' <<<"$env")
	[ -n "$dir" ] || dir=$(sed -n 's/^TMPDIR=//p' <<<"$env")
	find "${dir:-/tmp}" -maxdepth 1 -name 'ctrd-checkpoint*' -type d | sort
}

# no_checkpoint_left BEFORE: the restore left none of its extracted
# checkpoint behind (containerd-patches/tasks-remove-the-directory-a-checkpoint-is-extracted): nothing there but BEFORE's.
no_checkpoint_left() {
	local left
	left=$(comm -13 <(echo "$1") <(extracted_checkpoints))
	[ -z "$left" ] || die "the restore left its extracted checkpoint behind: $left"
}

@test "a checkpointed engine resumes where it stopped, weights intact" {
	local port
	port=$(free_port)
	start_engine eng "$port"

	local before pid0 start0 c0
	before=$(engine POST "$port" /generate "$PROMPT" | jq -r .text)
	answered "before the checkpoint" "$before"
	pid0=$(state_of "$port" pid)
	start0=$(state_of "$port" start_time)
	sleep 1
	c0=$(state_of "$port" counter)

	run_nerdctl checkpoint create eng ck1
	run_nerdctl inspect -f '{{.State.Status}}' eng
	is "${lines[-1]}" "exited" "container stopped by the checkpoint"

	local ckdirs
	ckdirs=$(extracted_checkpoints)
	run_nerdctl start --checkpoint ck1 eng
	wait_healthy "$port"
	no_checkpoint_left "$ckdirs"

	is "$(state_of "$port" pid)" "$pid0" "same engine process (pid in the container)"
	is "$(state_of "$port" start_time)" "$start0" "same start time: restored, not restarted"
	local c1
	c1=$(state_of "$port" counter)
	[ "$c1" -ge "$c0" ] || die "counter went back from $c0 to $c1"
	sleep 0.5
	[ "$(state_of "$port" counter)" -gt "$c1" ] || die "counter stopped after restore"

	local after
	after=$(engine POST "$port" /generate "$PROMPT" | jq -r .text)
	is "$after" "$before" "greedy output after restore"
	weights_intact "$port" eng
}

@test "an engine released before the checkpoint reloads its weights after restore" {
	local port
	port=$(free_port)
	start_engine eng2 "$port"
	local before
	before=$(engine POST "$port" /generate "$PROMPT" | jq -r .text)
	answered "before the checkpoint" "$before"

	engine POST "$port" /flush_cache >/dev/null
	engine POST "$port" /release_memory_occupation '{}' >/dev/null
	is "$(state_of "$port" loaded)" "false" "weights released"
	run_nerdctl checkpoint create eng2 ck2
	local ckdirs
	ckdirs=$(extracted_checkpoints)
	run_nerdctl start --checkpoint ck2 eng2
	wait_for "engine on port $port to answer" 30 engine GET "$port" /state
	no_checkpoint_left "$ckdirs"
	is "$(state_of "$port" loaded)" "false" "still released right after restore"

	engine POST "$port" /resume_memory_occupation '{}' >/dev/null
	is "$(state_of "$port" loaded)" "true" "weights reloaded"
	is "$(engine POST "$port" /generate "$PROMPT" | jq -r .text)" "$before" "greedy output"
}
