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

# go_arch: this host's architecture as Go names it.
go_arch() {
	case $(uname -m) in x86_64) echo amd64 ;; aarch64) echo arm64 ;; *) uname -m ;; esac
}

# made IMAGE [CREATE FLAGS...]: a checkpoint of a fresh engine as IMAGE.
made() {
	local image=$1 port
	shift
	port=$(free_port)
	start_engine csrc "$port"
	ocicp create "$@" csrc "$image"
	run_nerdctl rm -f csrc
}

@test "check refuses what the restore policy refuses, as nerdctl run does, and a signature it requires" {
	local image=rekindle.local/ckpt:check readme=registry.example/engine:ckpt
	made "$image"
	# The containerd serving CONTAINERD_ADDRESS is found, and its policy
	# read: rekindle.local and 127.0.0.1:* (scripts/containerd-config.sh).
	ocicp check "$image"
	is "${lines[-1]}" "$image: this host can restore it" "an image the policy allows"

	# README's own name is outside it.
	run_nerdctl tag "$image" "$readme"
	ocicp 1 check "$readme"
	[[ $output == *"policy: checkpoint image $readme may not be restored on this host: this host restores only the checkpoint images that checkpoint_restore_images in [plugins.'io.containerd.service.v1.tasks-service'] allows, and [\"registry.example/engine\"] matches none of its patterns (it holds [\"rekindle.local\", \"127.0.0.1:*\"]); to restore it, add \"registry.example/engine\", or a pattern that matches it such as \"registry.example\", to that list and restart containerd (the policy as $RK_DIR/config.toml and its imports $RK_DIR/rekindle.toml sets it)"* ]] ||
		die "check does not name the policy's refusal and its fix"
	run_nerdctl '?' run -d --name refused "$readme"
	[ "$status" -ne 0 ] || die "nerdctl run restored what the policy refuses"
	[[ $output == *"checkpoint image $readme may not be restored on this host"* ]] || die "nerdctl run refused it for another reason"

	# A host that requires a signature (the configuration as given).
	command -v openssl >/dev/null || skip "openssl is not installed"
	openssl genpkey -algorithm ed25519 -out "$BATS_TEST_TMPDIR/team.key" 2>/dev/null
	openssl pkey -in "$BATS_TEST_TMPDIR/team.key" -pubout -out "$BATS_TEST_TMPDIR/team.pub"
	cat >"$BATS_TEST_TMPDIR/signed.toml" <<-EOT
		version = 3
		[plugins.'io.containerd.service.v1.tasks-service']
		  checkpoint_restore_images = ["rekindle.local"]
		  checkpoint_restore_keys = ["$BATS_TEST_TMPDIR/team.pub"]
		  checkpoint_restore_require_signature = true
	EOT
	ocicp 1 check --containerd-config "$BATS_TEST_TMPDIR/signed.toml" "$image"
	[[ $output == *"signature: checkpoint image $image may not be restored on this host: this host restores only checkpoint images signed by a key of checkpoint_restore_keys"*"the image is not signed"*"oci-checkpoint sign --key KEY $image"* ]] ||
		die "check does not refuse an unsigned image where a signature is required"
	ocicp sign --key "$BATS_TEST_TMPDIR/team.key" "$image"
	ocicp check --containerd-config "$BATS_TEST_TMPDIR/signed.toml" "$image"
	is "${lines[-1]}" "$image: this host can restore it" "the signed image"
}

@test "check refuses malformed annotations, another architecture and a base image neither here nor reachable" {
	local image=rekindle.local/ckpt:bad tar=$BATS_TEST_TMPDIR/ckpt.tar
	made rekindle.local/ckpt:good --output "oci-archive:$tar"
	oci_python - "$tar" "$BATS_TEST_TMPDIR/bad.tar" "$image" <<-'PY'
		import sys
		import oci_tar
		src, dst, name = sys.argv[1:4]
		index, a = oci_tar.read(src)
		desc = index["manifests"][0]
		man = a.get_json(desc["digest"])
		man["annotations"].update({"org.rekindle.criu.version": "banana", "org.rekindle.gpu.count": "-3",
		                           "org.criu.checkpoint.host.arch": "arm64"})
		desc.update(a.add_json(man))
		desc["annotations"] = oci_tar.image_name(name)
		a.write(dst, [desc])
	PY
	run_nerdctl load -i "$BATS_TEST_TMPDIR/bad.tar"
	ocicp 1 check "$image"
	[[ $output == *"arch: checkpointed on an arm64 host, this host is $(go_arch)"* ]] || die "another architecture is not refused"
	[[ $output == *'criu: annotation org.rekindle.criu.version is "banana", not a CRIU version (digits and dots, such as 4.2.1)'* ]] ||
		die "criu.version=banana is not refused as malformed"
	[[ $output == *'gpu: annotation org.rekindle.gpu.count is "-3", not a count of GPUs (a whole number, 0 or more, such as 2)'* ]] ||
		die "gpu.count=-3 is not refused as malformed"

	# The base image gone from the store, and rekindle.local no registry.
	run_nerdctl load -i "$tar"
	ocicp check rekindle.local/ckpt:good
	run_nerdctl rmi "$ENGINE_IMAGE"
	ocicp 1 check rekindle.local/ckpt:good
	[[ $output == *"base: base image $ENGINE_IMAGE (rekindle.local/cpu-engine@sha256:"*") of the checkpoint is not in the local image store (no image has digest sha256:"*"), and its registry did not give it: "*"pull it (nerdctl pull rekindle.local/cpu-engine@sha256:"*") or load it (nerdctl load), then check again"* ]] ||
		die "a missing base image is not refused"
	load_image cpu-engine
}
