#!/usr/bin/env bats
# oci-checkpoint's decisions before the work: create says at once that
# nothing listens on the engine's port (and where the container listens),
# and check runs the decisions a restore will (policy, signature, base
# image, host facts), so that its exit 0 means the restore will not refuse.

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
	remove_images '*' "$BASE_IMAGE" "$ENGINE_IMAGE"
}

teardown_file() {
	stack_down
}

@test "create against an engine on another port says so at the first refused connection and gives up after --refused-timeout" {
	local port start took
	port=$(free_port)
	start_engine hsrc "$port"
	start=$(date +%s)
	# The vllm profile calls port 8000; the CPU engine listens on 30000.
	ocicp 1 create --engine vllm --refused-timeout 3s hsrc rekindle.local/ckpt:health
	took=$(($(date +%s) - start))
	[ "$took" -lt 30 ] || die "create waited ${took}s for a port that refuses connections"
	[[ $output == *"nothing listens on http://127.0.0.1:8000 in the container (connection refused); the container listens on TCP port 30000: wrong --port or --engine? Waiting up to 3s for it to listen (--refused-timeout), 10m0s in all (--health-timeout)"* ]] ||
		die "no hint at the first refused connection"
	[[ ${lines[-1]} == *"nothing listened on http://127.0.0.1:8000 in the container for 3s (connection refused); the container listens on TCP port 30000: wrong --port or --engine?"*"the engine is left running"* ]] ||
		die "the error does not name the cause and the fix"
	is "$(state_of "$port" loaded)" "true" "engine after the refused health wait"
	run_nerdctl images --format '{{.Repository}}:{{.Tag}}'
	[[ $output != *"ckpt:health"* ]] || die "an image was written"
}
