#!/usr/bin/env bats
# podman: `podman container restore IMAGE` (Debian's podman 4.3.1, with our
# runc and CRIU) resumes a checkpoint image made by oci-checkpoint from a
# containerd container, and the same image still restores with nerdctl.
# The limit, shown here as it is: podman gives a container's root directory
# mode 0555 where containerd's is 0755, and CRIU refuses to restore onto a
# root whose mode changed unless told --skip-file-rwx-check (docs/podman.md).

load helpers

setup_file() {
	need_built oci-checkpoint
	command -v podman >/dev/null || skip "podman is not installed (make deps installs Debian's podman)"
	command -v nsenter >/dev/null || skip "nsenter is not installed (util-linux)"
	stack_up
	load_image cpu-engine
	export CONTAINERD_ADDRESS=$RK_DIR/containerd.sock
	podman_up
	checkpoint_engine
}

teardown_file() {
	podman_down
	stack_down
}

# podman_up: a podman of this file's own: storage, run root, locks, events
# and network config under $BATS_FILE_TMPDIR/podman; cgroupfs (no systemd);
# the "none" network, so no CNI network is set up next to nerdctl's; our
# runc, and our CRIU first on PATH. Two configurations: containers.conf
# runs runc through a wrapper that gives CRIU skip-file-rwx-check (the
# setting a podman host needs for these images), containers-stock.conf runs
# runc as it is.
podman_up() {
	export PODMAN_DIR=$BATS_FILE_TMPDIR/podman
	local d=$PODMAN_DIR
	mkdir -p "$d/cni"
	printf 'skip-file-rwx-check\n' >"$d/criu.conf"
	printf '#!/bin/sh\nCRIU_CONFIG_FILE=%s exec %s "$@"\n' "$d/criu.conf" "$BIN/runc" >"$d/runc"
	chmod +x "$d/runc"
	local conf
	for conf in containers:"$d/runc" containers-stock:"$BIN/runc"; do
		cat >"$d/${conf%%:*}.conf" <<-EOF
			[containers]
			netns = "none"
			log_driver = "k8s-file"
			[network]
			network_backend = "cni"
			network_config_dir = "$d/cni"
			[engine]
			cgroup_manager = "cgroupfs"
			events_logger = "file"
			events_logfile_path = "$d/events.log"
			lock_type = "file"
			tmp_dir = "$d/tmp"
			static_dir = "$d/root/libpod"
			volume_path = "$d/root/volumes"
			runtime = "runc"
			[engine.runtimes]
			runc = ["${conf#*:}"]
		EOF
	done
	cat >"$d/storage.conf" <<-EOF
		[storage]
		driver = "overlay"
		graphroot = "$d/root"
		runroot = "$d/run"
	EOF
	printf 'unqualified-search-registries = []\n' >"$d/registries.conf"
	export CONTAINERS_CONF=$d/containers.conf CONTAINERS_STORAGE_CONF=$d/storage.conf
	export CONTAINERS_REGISTRIES_CONF=$d/registries.conf
	run_podman info --format '{{.Host.OCIRuntime.Path}} {{.Host.CgroupManager}} {{.Store.GraphRoot}}'
	is "$output" "$d/runc cgroupfs $d/root" "podman's runtime, cgroup manager and storage"
	# The base image, under the name the checkpoint records.
	run_podman load -i "$IMAGES/cpu-engine.tar"
}

# podman_down: remove podman's containers and images, then what its
# storage driver left mounted under $PODMAN_DIR.
podman_down() {
	[ -n "${PODMAN_DIR:-}" ] || return 0
	podman rm -a -f -t 0 >/dev/null 2>&1 || true
	podman rmi -a -f >/dev/null 2>&1 || true
	local m
	for m in $(awk -v d="$PODMAN_DIR/" 'index($5, d) == 1 {print $5}' /proc/self/mountinfo | sort -r); do
		umount "$m" 2>/dev/null || umount -l "$m" || true
	done
}

run_podman() {
	local expect=0
	case "$1" in [0-9]* | '?') expect=$1; shift ;; esac
	run_cmd "$expect" podman "$@"
}

# checkpoint_engine: run the CPU engine under nerdctl, note what the tests
# compare after the restore, and checkpoint it into an OCI archive
# ($CKPT_ARCHIVE, image $CKPT_IMAGE) that podman and nerdctl both load.
checkpoint_engine() {
	export CKPT_IMAGE=rekindle.local/ckpt:podman CKPT_ARCHIVE=$BATS_FILE_TMPDIR/ckpt.tar
	local port
	port=$(free_port)
	start_engine src "$port"
	local f=$BATS_FILE_TMPDIR/before
	engine POST "$port" /generate "$PROMPT" | jq -r .text >"$f.text"
	answered "before the checkpoint" "$(cat "$f.text")"
	engine GET "$port" /state >"$f.state"
	"$REKINDLE_ROOT/scripts/nerdctl.sh" "$RK_DIR" exec src stat -c %a / >"$f.rootmode"
	run_cmd "$BIN/oci-checkpoint" create --quiet --output "oci-archive:$CKPT_ARCHIVE" src "$CKPT_IMAGE"
	run_nerdctl rm -f src
	run_podman load -i "$CKPT_ARCHIVE"
}

before() {
	case "$1" in
	text | rootmode) cat "$BATS_FILE_TMPDIR/before.$1" ;;
	*) jq -r ".$1" "$BATS_FILE_TMPDIR/before.state" ;;
	esac
}

# in_ctr NAME CMD...: run CMD on the host in the network namespace of
# podman container NAME's process: the restored engine keeps the network
# namespace it was checkpointed with (loopback only here), so no port of
# the host reaches it.
in_ctr() {
	local name=$1 pid
	shift
	pid=$(podman inspect -f '{{.State.Pid}}' "$name") || return 1
	nsenter -t "$pid" -n "$@"
}

# podman_engine NAME GET|POST PATH [JSON]: one HTTP call to the engine in
# podman container NAME.
podman_engine() {
	local name=$1 method=$2 path=$3 body=${4:-}
	if [ -n "$body" ]; then
		in_ctr "$name" curl -fsS --max-time 10 -X "$method" -H 'Content-Type: application/json' \
			-d "$body" "http://127.0.0.1:30000$path"
	else
		in_ctr "$name" curl -fsS --max-time 10 -X "$method" "http://127.0.0.1:30000$path"
	fi
}

status_in() {
	podman exec "$1" cat /.rekindle/status 2>/dev/null
}

@test "the checkpoint image carries what podman looks for" {
	run_podman image inspect --format '{{index .Annotations "io.podman.annotations.checkpoint.runtime.name"}}' "$CKPT_IMAGE"
	is "$output" "runc" "podman's runtime annotation on the manifest"
	# config.dump is read by podman as its container config and by
	# checkpointctl as its own: both sets of fields are there.
	local layer
	layer=$(tar -xOf "$CKPT_ARCHIVE" index.json | jq -r '.manifests[0].digest')
	layer=$(tar -xOf "$CKPT_ARCHIVE" "blobs/sha256/${layer#sha256:}" | jq -r '.layers[0].digest')
	tar -xOf "$CKPT_ARCHIVE" "blobs/sha256/${layer#sha256:}" >"$BATS_TEST_TMPDIR/layer.tar"
	local cfg spec
	cfg=$(tar -xOf "$BATS_TEST_TMPDIR/layer.tar" config.dump)
	spec=$(tar -xOf "$BATS_TEST_TMPDIR/layer.tar" spec.dump)
	run_podman image inspect --format '{{.ID}}' "$ENGINE_IMAGE"
	is "$(jq -r .rootfsImageID <<<"$cfg")" "$output" "rootfsImageID is the base image's ID in podman"
	is "$(jq -r .rootfsImageName <<<"$cfg")" "$ENGINE_IMAGE" "base image name"
	is "$(jq -r .networkMode <<<"$cfg")" "none" "podman network mode"
	is "$(jq -r '.hooks // "none"' <<<"$spec")" "none" "spec.dump keeps no nerdctl hooks"
	run_cmd "$BIN/checkpointctl" show "$BATS_TEST_TMPDIR/layer.tar"
	[[ $output == *"$ENGINE_IMAGE"* ]] || die "checkpointctl does not show the base image"
}

@test "podman container restore IMAGE resumes the engine: same process, state and output" {
	run_podman container restore --name dst "$CKPT_IMAGE"
	run_podman inspect -f '{{.State.Status}} {{.State.Restored}}' dst
	is "$output" "running true" "restored container's state"
	wait_for "the wake helper's status" 30 status_in dst
	local status
	status=$(status_in dst)
	is "$(jq -r .outcome <<<"$status")" "resumed" "helper outcome in /.rekindle/status"
	is "$(jq -r '.calls[0].call' <<<"$status")" "POST /resume_memory_occupation {}" "resume call"
	local state
	state=$(podman_engine dst GET /state)
	is "$(jq -r .loaded <<<"$state")" "true" "weights reloaded by the helper"
	is "$(jq -r .pid <<<"$state")" "$(before pid)" "same engine process"
	is "$(jq -r .start_time <<<"$state")" "$(before start_time)" "restored, not restarted"
	[ "$(jq -r .counter <<<"$state")" -ge "$(before counter)" ] || die "counter went back"
	podman_engine dst GET '/state?verify=1' | weights_intact - dst podman exec
	is "$(podman_engine dst POST /generate "$PROMPT" | jq -r .text)" "$(before text)" "greedy output after the podman restore"
	run_podman logs dst
	[[ $output == *"rekindle-wake: engine sglang resumed in"* ]] || die "the helper's outcome is not in podman's log of the container"
	run_podman rm -f -t 0 dst
}

@test "the limit: podman's root is 0555, containerd's 0755; without skip-file-rwx-check CRIU refuses" {
	is "$(before rootmode)" "755" "mode of / in the nerdctl container"
	CONTAINERS_CONF=$PODMAN_DIR/containers-stock.conf run_podman 125 container restore --name stock "$CKPT_IMAGE"
	[[ $output == *"criu failed: type RESTORE"* ]] || die "podman does not report CRIU's failure"
	local log
	log=$(podman inspect -f '{{.State.RestoreLog}}' stock)
	grep -F 'File . has bad mode 040555 (expect 040755)' "$log" ||
		die "CRIU's restore.log does not name the root's mode: $(grep Error "$log")"
	run_podman mount stock
	is "$(stat -c %a "$output")" "555" "mode of / in the podman container"
	run_podman umount stock
	run_podman rm -f -t 0 stock
}

@test "a podman that runs crun refuses the image, naming runc" {
	command -v crun >/dev/null || skip "crun is not installed"
	run_podman 125 --runtime crun container restore --name other "$CKPT_IMAGE"
	is "$output" "~requires runtime: \"runc\"" "podman's error"
}

@test "the same archive still restores with nerdctl run" {
	run_nerdctl load -i "$CKPT_ARCHIVE"
	local port
	port=$(free_port)
	run_nerdctl run -d --name ndst -p "127.0.0.1:$port:30000" "$CKPT_IMAGE"
	# /state answers while the weights are still released; /health waits for the wake helper's resume
	wait_for "the restored engine on port $port to be healthy" 30 engine GET "$port" /health
	is "$(state_of "$port" start_time)" "$(before start_time)" "restored by nerdctl, not restarted"
	is "$(engine POST "$port" /generate "$PROMPT" | jq -r .text)" "$(before text)" "greedy output after the nerdctl restore"
	run_nerdctl rm -f ndst
}
