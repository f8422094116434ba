#!/usr/bin/env bats
# The image archives from `make images`: they load under their names with
# both ctr and nerdctl, carry the config users rely on, and the CPU engine
# serves its API from a container.

load helpers

setup_file() {
	stack_up
}

teardown_file() {
	stack_down
}

@test "ctr images import names the base image" {
	[ -f "$IMAGES/base.tar" ] || die "$IMAGES/base.tar is missing: run 'make images'"
	run_ctr images import "$IMAGES/base.tar"
	run_ctr images ls -q
	is "${lines[-1]}" "$BASE_IMAGE" "base image listed by name"
}

@test "the base image runs python3 with a plain PATH" {
	load_image base
	run_nerdctl run --rm --net none "$BASE_IMAGE" python3 -c 'import os, http.server; print(os.environ["PATH"])'
	# nerdctl may log a line of its own as the container exits (seen in CI:
	# 'level=error msg="forward signal child exited"'): the program's output is the rest.
	is "$(printf '%s\n' "${lines[@]}" | grep -v '^time="')" "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin" "PATH in the base image"
	run_nerdctl image inspect -f '{{json .Config.Cmd}}' "$BASE_IMAGE"
	is "${lines[-1]}" '["/bin/bash"]' "base image Cmd"
}

@test "nerdctl load names the engine image; its config starts the engine" {
	load_image cpu-engine
	is "${lines[-1]}" "Loaded image: $ENGINE_IMAGE" "nerdctl load output"
	run_nerdctl image inspect -f '{{json .Config.Cmd}}' "$ENGINE_IMAGE"
	is "${lines[-1]}" '["python3","-u","/engine/server.py"]' "engine Cmd"
}

@test "the engine answers from a container: health, generate, release, resume" {
	local port
	port=$(free_port)
	start_engine img-eng "$port" -e ENGINE_STATE_MB=16
	is "$(state_of "$port" state_mb)" "16" "ENGINE_STATE_MB reaches the engine"
	is "$(state_of "$port" pid)" "1" "the engine is the container's PID 1"
	weights_intact "$port" img-eng

	local prompt='{"text": "images test", "max_new_tokens": 6}' before
	before=$(engine POST "$port" /generate "$prompt" | jq -r .text)
	is "$(echo "$before" | wc -w)" "6" "six tokens generated"

	engine POST "$port" /release_memory_occupation >/dev/null
	run_cmd 22 curl -fsS --max-time 5 "http://127.0.0.1:$port/health"
	engine POST "$port" /resume_memory_occupation >/dev/null
	is "$(engine POST "$port" /generate "$prompt" | jq -r .text)" "$before" "same output after release/resume"

	run_nerdctl exec img-eng python3 /engine/server.py check
	run_nerdctl rm -f img-eng
}
