#!/bin/bash
# Unit tests for cuda-checkpoint: the real binary against tests/libcuda.so.1
# (a stub driver that logs its calls) and a fake /proc tree.
# Each test_* function is one test; one that cannot run here returns 77
# (skip); the last line is "N passed, N failed, N skipped".
set -u
here=$(cd "$(dirname "$0")" && pwd)
bin=$here/../cuda-checkpoint
T=$(mktemp -d /tmp/cuda-checkpoint-test.XXXXXX)
trap 'rm -rf "$T"' EXIT

export REKINDLE_LIBCUDA=$here/libcuda.so.1 REKINDLE_PROC=$T/proc STUB_LOG=$T/calls
unset REKINDLE_DEVICE_MAP REKINDLE_CUDA_CHECKPOINT_LOG STUB_FAIL STUB_STATE STUB_TID

U=(GPU-0a000000-1111-2222-3333-444444444440 GPU-0a000000-1111-2222-3333-444444444441
   GPU-0a000000-1111-2222-3333-444444444442 GPU-0a000000-1111-2222-3333-444444444443)
P=4242 # the restored process

# host N: the host has GPUs U[0..N-1], minors 0..N-1, seen by /proc and the driver.
host() {
	rm -rf "$T/proc"
	local i list=
	for ((i = 0; i < $1; i++)); do
		local d=$T/proc/driver/nvidia/gpus/0000:0$i:00.0
		mkdir -p "$d"
		printf 'Model: \t\t NVIDIA H200\nIRQ: \t\t 1\nGPU UUID: \t %s\nBus Location: \t 0000:0%d:00.0\nDevice Minor: \t %d\n' \
			"${U[$i]}" "$i" "$i" >"$d/information"
		list+=${list:+,}${U[$i]}
	done
	export STUB_UUIDS=$list
}

# sees MINOR...: the restored process's /dev holds these /dev/nvidiaN (and the usual others).
sees() {
	local dev=$T/proc/$P/root/dev m
	rm -rf "$dev" && mkdir -p "$dev"
	touch "$dev/nvidiactl" "$dev/nvidia-uvm" "$dev/nvidia-uvm-tools" "$dev/null"
	for m in "$@"; do touch "$dev/nvidia$m"; done
}

# [MODEL=NAME] recorded INDEX...: /.rekindle/devices.json lists these GPUs, as written at
# checkpoint (with "model" when MODEL is set, as oci-checkpoint writes it).
recorded() {
	local dir=$T/proc/$P/root/.rekindle i sep=
	mkdir -p "$dir"
	{
		printf '['
		for i in "$@"; do
			printf '%s\n  {"uuid": "%s", "pci_bus_id": "0000:0%d:00.0", "minor": %d%s}' "$sep" "${U[$i]}" "$i" "$i" \
				"${MODEL:+, \"model\": \"$MODEL\"}"
			sep=,
		done
		printf '\n]\n'
	} >"$dir/devices.json"
}

# ckpt ARGS...: run the tool as CRIU does (stdout and stderr in one stream).
ckpt() {
	rm -f "$STUB_LOG"
	out=$("$bin" "$@" 2>&1)
	rc=$?
	calls=$(grep '^cuCheckpoint' "$STUB_LOG" 2>/dev/null)
	return 0
}

fail_msg() { printf '    %s\n' "$@"; return 1; }
skip() { printf '    skip: %s\n' "$*"; return 77; }
# need_root || return: a test that checks device nodes it makes is skipped,
# not passed, where mknod is not allowed.
need_root() { [[ $(id -u) == 0 ]] || skip "needs root for mknod"; }
is() { [[ "$1" == "$2" ]] || fail_msg "$3:" "expected: $2" "actual:   $1"; }
has() { [[ "$1" == *"$2"* ]] || fail_msg "$3: missing \"$2\" in:" "$1"; }
restored_with() { is "$calls" "cuCheckpointProcessRestore pid=$P $1" "restore call"; }

# --- CLI surface CRIU relies on -------------------------------------------

test_help_lists_options_without_driver() {
	REKINDLE_LIBCUDA=/nonexistent ckpt -h
	is "$rc" 0 "exit status" || return 1
	local o
	for o in --action --get-state --get-restore-tid --toggle --hold --pid --timeout --device-map --help; do
		has "$out" "$o" "help" || return 1
	done
	REKINDLE_LIBCUDA=/nonexistent ckpt --help && is "$rc" 0 "--help exit status"
}

test_get_state_prints_only_the_state() {
	host 1
	local s want=(running locked checkpointed failed)
	for s in 0 1 2 3; do
		STUB_STATE=$s ckpt --get-state --pid 77
		is "$rc" 0 "exit status" && is "$out" "${want[$s]}" "output for state $s" || return 1
	done
	has "$(cat "$STUB_LOG")" "cuCheckpointProcessGetState pid=77" "driver call"
}

test_get_restore_tid_prints_the_tid() {
	host 1
	STUB_TID=4321 ckpt --get-restore-tid --pid 77
	is "$rc" 0 "exit status" && is "$out" 4321 "output"
}

test_get_restore_tid_fails_for_non_cuda_process() {
	host 1
	STUB_FAIL=cuCheckpointProcessGetRestoreThreadId=3 REKINDLE_CUDA_CHECKPOINT_LOG=$T/log ckpt --get-restore-tid -p 77
	is "$rc" 1 "exit status" && has "$out" "pid 77 uses no CUDA (CUDA_ERROR_NOT_INITIALIZED (3))" "message" &&
		has "$(cat "$T/log")" "pid 77: uses no CUDA" "log" || return 1
	[[ "$(cat "$T/log")" != *error* ]] || { echo "logged as an error: $(cat "$T/log")"; return 1; }
	STUB_FAIL=cuCheckpointProcessGetRestoreThreadId=1 ckpt --get-restore-tid -p 77
	is "$rc" 1 "exit status (another error)" && has "$out" "get-restore-tid of pid 77 failed" "error"
}

test_plugin_sequence_lock_checkpoint_restore_unlock() {
	host 2; sees 0 1; recorded 0 1
	local all= a
	for a in "lock --pid $P --timeout 10000" "checkpoint --pid $P" "restore --pid $P" "unlock --pid $P"; do
		ckpt --action $a
		is "$rc" 0 "exit status of --action $a" && is "$out" "" "output of --action $a" || return 1
		all+=$calls$'\n'
	done
	is "$all" "cuCheckpointProcessLock pid=$P timeout=10000 reserved=0
cuCheckpointProcessCheckpoint pid=$P args=null
cuCheckpointProcessRestore pid=$P args=null
cuCheckpointProcessUnlock pid=$P args=null
" "driver calls"
}

test_lock_without_timeout_passes_zero() {
	host 1
	ckpt --action lock -p 9
	is "$calls" "cuCheckpointProcessLock pid=9 timeout=0 reserved=0" "lock call"
}

test_unsets_cuda_visible_devices_to_see_all_gpus() {
	host 2
	CUDA_VISIBLE_DEVICES=1 ckpt --get-state --pid 9
	has "$(cat "$STUB_LOG")" "cuInit flags=0 CUDA_VISIBLE_DEVICES=unset" "cuInit"
}

test_usage_errors_exit_2() {
	host 1
	ckpt --pid 9; is "$rc" 2 "no operation" || return 1
	ckpt --action lock; is "$rc" 2 "no pid" || return 1
	ckpt --action freeze --pid 9; is "$rc" 2 "bad action" && has "$out" 'unknown action "freeze"' "message" || return 1
	ckpt --action lock --pid abc; is "$rc" 2 "bad pid" || return 1
	ckpt --action lock --pid 9 --device-map none; is "$rc" 2 "map on lock" || return 1
	ckpt --get-state --toggle --pid 9; is "$rc" 2 "two operations" || return 1
	is "$(cat "$STUB_LOG" 2>/dev/null)" "" "no driver call on usage errors"
}

test_missing_libcuda_is_a_clear_error() {
	REKINDLE_LIBCUDA=$T/nope.so ckpt --get-state --pid 9
	is "$rc" 1 "exit status" && has "$out" "cannot load $T/nope.so" "error"
}

# --- driver errors ---------------------------------------------------------

test_a_checkpoint_or_restore_that_never_returns_fails_at_the_deadline() {
	host 1; sees 0; recorded 0
	local a t0 log=$T/deadline.log
	for a in checkpoint restore unlock; do
		t0=$SECONDS
		STUB_HANG=cuCheckpointProcess${a^} REKINDLE_CUDA_CHECKPOINT_DEADLINE=1 REKINDLE_CUDA_CHECKPOINT_LOG=$log \
			ckpt --action $a --pid $P
		is "$rc" 1 "exit status of a $a past its deadline" || return 1
		has "$out" "$a of pid $P did not return within 1s (REKINDLE_CUDA_CHECKPOINT_DEADLINE)" "error" || return 1
		((SECONDS - t0 < 10)) || fail_msg "the $a took $((SECONDS - t0)) s to give up" || return 1
	done
	has "$(cat "$log")" "restore of pid $P did not return within 1s" "the log says so too" || return 1
	# Lock has its own timeout, which the plugin passes.
	STUB_HANG=cuCheckpointProcessLock REKINDLE_CUDA_CHECKPOINT_DEADLINE=1 timeout 3 "$bin" --action lock --pid $P >/dev/null 2>&1
	is "$?" 124 "lock is not under the deadline" || return 1
	# A deadline that is not a number is refused before the driver starts.
	rm -f "$STUB_LOG"
	REKINDLE_CUDA_CHECKPOINT_DEADLINE=soon ckpt --action restore --pid $P
	is "$rc" 2 "a bad deadline" && is "$(cat "$STUB_LOG" 2>/dev/null)" "" "no driver call"
}

test_a_deadline_of_0_is_none_and_a_bad_one_is_refused() {
	host 1
	STUB_HANG=cuCheckpointProcessCheckpoint REKINDLE_CUDA_CHECKPOINT_DEADLINE=0 timeout 2 "$bin" --action checkpoint --pid 9 >/dev/null 2>&1
	is "$?" 124 "deadline 0: no deadline (the stub still waits when timeout(1) ends it)" || return 1
	REKINDLE_CUDA_CHECKPOINT_DEADLINE=soon ckpt --action checkpoint --pid 9
	is "$rc" 2 "a deadline that is not a number" && has "$out" 'bad REKINDLE_CUDA_CHECKPOINT_DEADLINE "soon"' "error"
}

test_driver_errors_name_the_curesult() {
	host 1; sees 0; recorded 0
	STUB_FAIL=cuCheckpointProcessLock=909 ckpt --action lock --pid $P --timeout 5
	is "$rc" 1 "lock exit" && has "$out" "lock of pid $P failed: CUDA_ERROR_TIMEOUT (909)" "lock error" || return 1
	STUB_FAIL=cuCheckpointProcessRestore=1 ckpt --action restore --pid $P
	is "$rc" 1 "restore exit" && has "$out" "CUDA_ERROR_INVALID_VALUE (1)" "restore error" || return 1
	STUB_FAIL=cuCheckpointProcessUnlock=401 ckpt --action unlock --pid $P
	has "$out" "CUDA_ERROR_ILLEGAL_STATE (401)" "unlock error" || return 1
	STUB_FAIL=cuCheckpointProcessCheckpoint=12345 ckpt --action checkpoint --pid $P
	is "$rc" 1 "checkpoint exit" && has "$out" "(12345)" "unknown code" || return 1
	STUB_FAIL=cuInit=100 ckpt --get-state --pid $P
	is "$rc" 1 "cuInit exit" && has "$out" "cuInit failed: CUDA_ERROR_NO_DEVICE (100)" "cuInit error"
}

# --- remap on restore ------------------------------------------------------

test_same_gpus_restore_without_pairs() {
	host 2; sees 1; recorded 1
	ckpt --action restore --pid $P
	is "$rc" 0 "exit status" && restored_with "args=null"
}

test_same_gpus_in_another_order_is_identity() {
	host 4; sees 0 2 3; recorded 3 0 2
	ckpt --action restore --pid $P
	is "$rc" 0 "exit status" && restored_with "args=null"
}

test_moved_gpu_is_completed_to_a_swap() {
	# the measured case: a lone 1->0 is rejected by the driver, the swap works
	host 2; sees 0; recorded 1
	ckpt --action restore --pid $P
	is "$rc" 0 "exit status" && restored_with "pairs=2 reserved=0 ${U[1]}>${U[0]} ${U[0]}>${U[1]}"
}

test_completion_covers_every_host_gpu() {
	host 4; sees 0; recorded 2
	ckpt --action restore --pid $P
	is "$rc" 0 "exit status" &&
		restored_with "pairs=4 reserved=0 ${U[2]}>${U[0]} ${U[1]}>${U[1]} ${U[3]}>${U[3]} ${U[0]}>${U[2]}"
}

test_shared_gpus_stay_put() {
	host 4; sees 1 2; recorded 0 1
	ckpt --action restore --pid $P
	is "$rc" 0 "exit status" &&
		restored_with "pairs=4 reserved=0 ${U[1]}>${U[1]} ${U[0]}>${U[2]} ${U[3]}>${U[3]} ${U[2]}>${U[0]}"
}

test_device_node_minor_wins_over_its_name() {
	need_root || return
	host 2; sees; recorded 1
	mknod "$T/proc/$P/root/dev/nvidia0" c 195 1 # CDI may name the node after another minor
	ckpt --action restore --pid $P
	is "$rc" 0 "exit status" && restored_with "args=null"
}

test_missing_devices_json_with_all_gpus_restores_as_is() {
	host 2; sees 0 1
	ckpt --action restore --pid $P
	is "$rc" 0 "exit status" && restored_with "args=null"
}

test_devices_json_symlink_to_a_host_file_is_not_followed() {
	host 2; sees 0 1
	local dir=$T/proc/$P/root/.rekindle secret=$T/host-secret
	mkdir -p "$dir"
	printf '[{"uuid": "%s"}] host-only-content\n' "${U[1]}" >"$secret"
	ln -sf "$secret" "$dir/devices.json"
	ckpt --action restore --pid $P
	is "$rc" 1 "exit status" && has "$out" "devices.json is a symlink: refusing to follow it" "error" &&
		{ [[ $out != *host-only-content* ]] || fail_msg "the host file's content is in the output:" "$out"; } &&
		is "$calls" "" "no restore call"
}

test_dev_symlink_out_of_the_root_stays_in_the_root() {
	host 2
	# /dev itself a symlink to an absolute path: resolved in the container's
	# root, where that path does not exist, never on the host.
	local root=$T/proc/$P/root
	rm -rf "$root/dev" && mkdir -p "$root"
	mkdir -p "$T/hostdev" && touch "$T/hostdev/nvidia0" "$T/hostdev/nvidia1"
	ln -s "$T/hostdev" "$root/dev"
	recorded 0 1
	ckpt --action restore --pid $P
	is "$rc" 1 "exit status" && has "$out" "cannot list $root/dev" "error" && is "$calls" "" "no restore call"
}

test_devices_json_fifo_is_refused_without_blocking() {
	host 2; sees 0 1
	local dir=$T/proc/$P/root/.rekindle
	mkdir -p "$dir" && rm -f "$dir/devices.json" && mkfifo "$dir/devices.json"
	rm -f "$STUB_LOG"
	out=$(timeout 10 "$bin" --action restore --pid $P 2>&1)
	rc=$?
	is "$rc" 1 "exit status (124: it blocked on the FIFO)" && has "$out" "devices.json is not a regular file" "error"
}

test_oversized_devices_json_is_refused() {
	host 2; sees 0 1; recorded 0 1
	head -c 2000000 /dev/zero | tr '\0' ' ' >>"$T/proc/$P/root/.rekindle/devices.json"
	ckpt --action restore --pid $P
	is "$rc" 1 "exit status" && has "$out" "is larger than 1048576 bytes" "error" && is "$calls" "" "no restore call"
}

test_missing_devices_json_with_some_gpus_is_an_error() {
	host 2; sees 1
	ckpt --action restore --pid $P
	is "$rc" 1 "exit status" && has "$out" "no $T/proc/$P/root/.rekindle/devices.json" "error" &&
		has "$out" "sees 1 of this host's 2 GPUs" "error" && is "$calls" "" "no restore call"
}

test_more_gpus_than_the_host_has() {
	host 2; sees 0 1; recorded 0 1 2
	ckpt --action restore --pid $P
	is "$rc" 1 "exit status" && has "$out" "the checkpoint used 3 GPUs but this host has 2" "error" || return 1
	ckpt --action restore --pid $P --device-map "${U[0]}=${U[1]},${U[1]}=${U[0]},${U[2]}=${U[2]}"
	is "$rc" 1 "exit status (map)" && has "$out" "names 3 GPUs but this host has 2" "map error" &&
		is "$calls" "" "no restore call"
}

test_more_gpus_than_the_tool_handles_is_named() {
	host 1; sees 0; recorded 0
	local i d
	for ((i = 1; i <= 64; i++)); do
		d=$T/proc/driver/nvidia/gpus/0000:$(printf %02x $i):00.0
		mkdir -p "$d"
		printf 'GPU UUID: \t GPU-0b000000-1111-2222-3333-%012x\nDevice Minor: \t %d\n' "$i" "$i" >"$d/information"
	done
	ckpt --action restore --pid $P
	is "$rc" 1 "exit status" && has "$out" "lists more than 64 GPUs, the most this tool handles" "error" &&
		is "$calls" "" "no restore call"
}

test_gpu_count_changed_is_an_error() {
	host 4; sees 0 1; recorded 2
	ckpt --action restore --pid $P
	is "$rc" 1 "exit status" && has "$out" "used 1 GPU(s) but the restored container sees 2" "error"
}

# An image taken with GPUs 0 and 1, run with --device nvidia.com/gpu=0: CRIU
# restores /dev as dumped (nvidia0, nvidia1), the device cgroup lets the
# driver show the process GPU 0 only. Refused naming both counts, before any
# restore call or device node.
test_image_of_two_gpus_in_a_container_of_one_is_refused() {
	host 2; sees 0 1; MODEL="NVIDIA H200" recorded 0 1
	STUB_UUIDS=${U[0]} ckpt --action restore --pid $P
	is "$rc" 1 "exit status" &&
		has "$out" "the checkpoint used 2 GPU(s) but the restored container sees 1 (the driver shows it 1 of this host's 2 GPUs): give it 2 GPU(s) of model NVIDIA H200" "error" &&
		is "$calls" "" "no restore call" || return 1
	# The same with a /dev that holds only the new container's node.
	sees 0
	ckpt --action restore --pid $P
	is "$rc" 1 "exit status (/dev of one)" && has "$out" "used 2 GPU(s) but the restored container sees 1: give it 2" "error"
}

# A count refused in a narrowed view makes no /dev node first.
test_count_refused_before_any_node_is_made() {
	host 3; sees 1 2; recorded 1 2
	STUB_UUIDS=${U[0]} ckpt --action restore --pid $P
	is "$rc" 1 "exit status" && has "$out" "used 2 GPU(s) but the restored container sees 1" "error" || return 1
	[ ! -e "$T/proc/$P/root/dev/nvidia0" ] || fail_msg "created /dev/nvidia0 for a restore it refused"
}

test_other_gpu_model_is_refused_naming_both() {
	host 2; sees 0; MODEL="NVIDIA H100 80GB HBM3" recorded 1
	ckpt --action restore --pid $P
	is "$rc" 1 "exit status" &&
		has "$out" "the checkpoint ran on NVIDIA H100 80GB HBM3 (${U[1]}) but the restored container's GPU ${U[0]} is NVIDIA H200" "error" &&
		has "$out" "give it 1 GPU(s) of model NVIDIA H100 80GB HBM3" "fix" && is "$calls" "" "no restore call"
}

test_same_gpu_model_recorded_restores() {
	host 2; sees 0; MODEL="NVIDIA H200" recorded 1
	ckpt --action restore --pid $P
	is "$rc" 0 "exit status" && restored_with "pairs=2 reserved=0 ${U[1]}>${U[0]} ${U[0]}>${U[1]}"
}

test_bad_uuid_in_devices_json() {
	host 2; sees 0; recorded 1
	sed -i 's/GPU-0a000000-1111-2222-3333-444444444441/GPU-0a000000-1111-2222-3333-44444444444/' \
		"$T/proc/$P/root/.rekindle/devices.json"
	ckpt --action restore --pid $P
	is "$rc" 1 "exit status" && has "$out" 'bad GPU UUID "GPU-0a000000-1111-2222-3333-44444444444"' "error" &&
		is "$calls" "" "no restore call"
}

test_gpu_node_unknown_to_the_driver() {
	host 2; sees 5; recorded 0
	ckpt --action restore --pid $P
	is "$rc" 1 "exit status" && has "$out" "GPU minor 5" "error"
}

# In a container, CRIU restores /dev with the checkpoint's node (nvidia1) while
# the new container's device cgroup lets the driver show only its own GPU 0.
test_stale_dev_in_a_narrowed_driver_view_restores_onto_the_views_gpus() {
	need_root || return # the tool makes /dev/nvidia0: without mknod the restore fails
	host 2; sees 1; recorded 1
	STUB_UUIDS=${U[0]} REKINDLE_CUDA_CHECKPOINT_LOG=$T/log ckpt --action restore --pid $P
	is "$rc" 0 "exit status" && restored_with "pairs=1 reserved=0 ${U[1]}>${U[0]}" &&
		has "$(cat "$T/log")" "the driver shows it 1 of the host's 2 GPUs" "log" || return 1
	is "$(stat -c '%F %t:%T %a' "$T/proc/$P/root/dev/nvidia0")" "character special file c3:0 666" \
		"created /dev/nvidia0 (195:0)"
}

# The created node is 0666 whatever the tool's umask: made so at once, with
# no chmod after it.
test_created_gpu_node_is_0666_under_umask_022() {
	need_root || return
	host 2; sees 1; recorded 1
	local mask=$(umask)
	umask 022
	STUB_UUIDS=${U[0]} ckpt --action restore --pid $P
	umask "$mask"
	is "$rc" 0 "exit status" && restored_with "pairs=1 reserved=0 ${U[1]}>${U[0]}" &&
		is "$(stat -c '%F %t:%T %a' "$T/proc/$P/root/dev/nvidia0")" "character special file c3:0 666" \
			"created /dev/nvidia0 (195:0) under umask 022"
}

# The restored process runs while the tool makes its /dev/nvidiaN: a symlink
# to a host file put where the node was, or is, must never be chmodded.
test_gpu_node_swapped_for_a_symlink_is_not_chmodded() {
	need_root || return
	local dev=$T/proc/$P/root/dev host_file=$T/host-file
	host 2; sees 1; recorded 1
	rm -f "$host_file" && touch "$host_file" && chmod 0600 "$host_file"
	# swapped right after mknodat (the stub, preloaded, stands in for it)
	STUB_UUIDS=${U[0]} STUB_SWAP_NODE=$host_file LD_PRELOAD=$REKINDLE_LIBCUDA ckpt --action restore --pid $P
	has "$(cat "$STUB_LOG")" "mknodat: swapped nvidia0 for a symlink to $host_file" "the swap" &&
		is "$(stat -c %a "$host_file")" 600 "mode of the host file after a swap" || return 1
	# already there before the tool looks
	sees 1
	ln -s "$host_file" "$dev/nvidia0"
	STUB_UUIDS=${U[0]} ckpt --action restore --pid $P
	is "$(stat -c %a "$host_file")" 600 "mode of the host file behind an existing symlink" || return 1
	[[ -L $dev/nvidia0 ]] || fail_msg "/dev/nvidia0 is no longer the symlink"
}

# Outside a device cgroup the driver shows every GPU: /dev is what counts.
test_dev_inside_the_whole_driver_view_is_used_as_is() {
	host 2; sees 1; recorded 1
	ckpt --action restore --pid $P
	is "$rc" 0 "exit status" && restored_with "args=null" || return 1
	[ ! -e "$T/proc/$P/root/dev/nvidia0" ] || { echo "  created a node although the view was not narrowed"; return 1; }
}

test_device_map_overrides_and_is_completed() {
	host 2; sees 0 1; recorded 0 1
	ckpt --action restore --pid $P --device-map "${U[1]}=${U[0]}"
	is "$rc" 0 "exit status" && restored_with "pairs=2 reserved=0 ${U[1]}>${U[0]} ${U[0]}>${U[1]}"
}

test_device_map_from_environment_and_none() {
	host 2; sees 1
	REKINDLE_DEVICE_MAP="${U[0]}=${U[1]}" ckpt --action restore --pid $P
	is "$rc" 0 "exit status" && restored_with "pairs=2 reserved=0 ${U[0]}>${U[1]} ${U[1]}>${U[0]}" || return 1
	REKINDLE_DEVICE_MAP=none ckpt --action restore --pid $P
	is "$rc" 0 "exit status (none)" && restored_with "args=null"
}

test_device_map_bad_uuid_syntax() {
	host 2
	local bad
	for bad in "GPU-xyz=${U[0]}" "${U[0]}=GPU-0a000000-1111-2222-3333-44444444444g" "${U[0]}" "${U[0]}=${U[1]}x"; do
		ckpt --action restore --pid $P --device-map "$bad"
		is "$rc" 1 "exit status for $bad" && has "$out" "device map" "error for $bad" || return 1
	done
}

test_device_map_not_a_bijection() {
	host 3
	ckpt --action restore --pid $P --device-map "${U[0]}=${U[1]},${U[0]}=${U[2]}"
	is "$rc" 1 "exit (old twice)" && has "$out" "not a bijection: ${U[0]} is mapped twice" "error" || return 1
	ckpt --action restore --pid $P --device-map "${U[0]}=${U[2]},${U[1]}=${U[2]}"
	is "$rc" 1 "exit (new twice)" && has "$out" "two GPUs are mapped onto ${U[2]}" "error"
}

test_device_map_target_not_on_host() {
	host 2
	ckpt --action restore --pid $P --device-map "${U[0]}=${U[3]}"
	is "$rc" 1 "exit status" && has "$out" "cannot restore onto ${U[3]}" "error" &&
		has "$out" "the driver lists 2 GPU(s) to this process (${U[0]}, ${U[1]}) in device cgroup " "the driver's view"
}

test_toggle_checkpoints_then_restores_with_remap() {
	host 2; sees 0; recorded 1
	STUB_STATE=0 ckpt --toggle --pid $P --timeout 500
	is "$rc" 0 "exit (running)" && is "$calls" "cuCheckpointProcessGetState pid=$P
cuCheckpointProcessLock pid=$P timeout=500 reserved=0
cuCheckpointProcessCheckpoint pid=$P args=null" "calls (running)" || return 1
	STUB_STATE=2 ckpt --toggle --pid $P
	is "$rc" 0 "exit (checkpointed)" && is "$calls" "cuCheckpointProcessGetState pid=$P
cuCheckpointProcessRestore pid=$P pairs=2 reserved=0 ${U[1]}>${U[0]} ${U[0]}>${U[1]}
cuCheckpointProcessUnlock pid=$P args=null" "calls (checkpointed)" || return 1
	STUB_STATE=1 ckpt --toggle --pid $P
	is "$rc" 1 "exit (locked)" && has "$out" "its CUDA state is locked" "error"
}

test_hold_keeps_the_driver_initialized_until_a_signal() {
	rm -f "$STUB_LOG"
	REKINDLE_CUDA_CHECKPOINT_LOG=$T/hold.log "$bin" --hold 2>"$T/hold.err" &
	local pid=$! i
	for ((i = 0; i < 50; i++)); do grep -q '^cuInit' "$STUB_LOG" 2>/dev/null && break; sleep 0.1; done
	is "$(cat "$STUB_LOG" 2>/dev/null)" "cuInit flags=0 CUDA_VISIBLE_DEVICES=unset" "driver calls while holding (cuInit only: no context)" || return 1
	sleep 0.2
	kill -0 "$pid" 2>/dev/null || { echo "--hold exited before a signal: $(cat "$T/hold.err")"; return 1; }
	kill -TERM "$pid"
	wait "$pid"
	is "$?" 0 "exit status after SIGTERM" &&
		has "$(cat "$T/hold.log")" "released the CUDA driver (signal 15)" "log"
}

test_hold_without_a_driver_fails_naming_it() {
	REKINDLE_LIBCUDA=/nonexistent ckpt --hold
	is "$rc" 1 "exit status" && has "$out" "cannot load /nonexistent" "error"
}

test_log_file_records_the_remap() {
	host 2; sees 0; recorded 1
	REKINDLE_CUDA_CHECKPOINT_LOG=$T/log ckpt --action restore --pid $P
	is "$out" "" "quiet on success" && has "$(cat "$T/log")" "pid $P: remap ${U[1]} -> ${U[0]}" "log" &&
		grep -Eq "^[0-9]+\.[0-9]{3} \[[0-9]+\] pid $P: restore with GPU remap done in [0-9]+\.[0-9]{3}s\$" "$T/log" ||
		{ echo "log lacks the timed restore line:"; cat "$T/log"; return 1; }
}

passed=0 failed=0 skipped=0
for t in $(declare -F | awk '$3 ~ /^test_/ {print $3}'); do
	"$t"
	case $? in
	0) echo "ok   $t"; passed=$((passed + 1)) ;;
	77) echo "skip $t"; skipped=$((skipped + 1)) ;;
	*) echo "FAIL $t"; failed=$((failed + 1)) ;;
	esac
done
echo "$passed passed, $failed failed, $skipped skipped"
[[ $failed == 0 ]]
