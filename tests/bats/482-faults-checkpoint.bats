#!/usr/bin/env bats
# Faults on the checkpoint side (issue 61): oci-checkpoint create interrupted
# at each phase leaves the engine running and resumed and nothing half made;
# a container create stopped gives back its address and ports; the wake
# helper leaves no zombie under an engine's PID 1 that never reaps.

load helpers

setup_file() {
	need_built oci-checkpoint rekindle-wake
	stack_up
	load_image base
	load_image cpu-engine
	export CONTAINERD_ADDRESS=$RK_DIR/containerd.sock
}

teardown() {
	[ -n "${RK_DIR:-}" ] || return 0
	if [ -f "$BATS_TEST_TMPDIR/create.pid" ]; then
		kill -KILL "$(cat "$BATS_TEST_TMPDIR/create.pid")" 2>/dev/null || true
	fi
	remove_containers
	remove_images '*' "$BASE_IMAGE" "$ENGINE_IMAGE"
}

teardown_file() {
	stack_down
}

ctr_() { "$BIN/ctr" --address "$CONTAINERD_ADDRESS" -n default "$@"; }

# store_state: what this stack holds that a checkpoint could leave behind:
# images, leases, snapshots, content being written and blobs.
store_state() {
	ctr_ images ls -q
	ctr_ leases ls -q
	ctr_ snapshots ls | awk 'NR > 1 {print $1}' | sort
	ctr_ content active
	ctr_ content ls -q | sort
}

# cni_ip NAME: the address host-local gave container NAME (its allocation
# file names NAMESPACE-ID), "" when none.
cni_ip() {
	local id
	id=$("$REKINDLE_ROOT/scripts/nerdctl.sh" "$RK_DIR" inspect -f '{{.ID}}' "$1")
	grep -l -- "^default-$id" /var/lib/cni/networks/bridge/* 2>/dev/null | xargs -r -n1 basename
}

# procs_of NAME: the container's processes as "PID STATE COMM" lines, from
# the host's /proc (PID as the container sees it).
procs_of() {
	local pid p
	for pid in $(ctr_ tasks ps "$("$REKINDLE_ROOT/scripts/nerdctl.sh" "$RK_DIR" inspect -f '{{.ID}}' "$1")" | awk 'NR > 1 {print $1}'); do
		p=$(awk '/^NSpid:/ {print $NF}' "/proc/$pid/status")
		echo "$p $(awk '/^State:/ {print $2}' "/proc/$pid/status") $(cat "/proc/$pid/comm")"
	done
}

@test "after create stops the engine its address and ports are free: the image restores on the same host port" {
	local port image=rekindle.local/ckpt:same-port ip
	port=$(free_port)
	start_engine psrc "$port"
	ip=$(cni_ip psrc)
	[ -n "$ip" ] || die "no CNI address recorded for psrc"
	record_engine "$port"
	ocicp create psrc "$image"
	run_nerdctl ps -a --filter name=psrc --format '{{.Status}}'
	is "${lines[-1]}" "Created" "the source container after create: stopped, its task deleted"
	is "$(cni_ip psrc)" "" "CNI address of the stopped source container"
	! ss -Hltn "sport = :$port" | grep -q . || die "host port $port still held: $(ss -Hltnp "sport = :$port")"
	# README's flow on one host: the source container is still there.
	run_nerdctl run -d --name pdst -p "127.0.0.1:$port:30000" "$image"
	wait_for "the restored engine" 30 engine GET "$port" /health
	is "$(engine POST "$port" /generate "$PROMPT" | jq -r .text)" "$E_TEXT" "the restored engine's answer on the same port"
	run_nerdctl rm -f pdst psrc
}
