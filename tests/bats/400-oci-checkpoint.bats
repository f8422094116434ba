#!/usr/bin/env bats
# oci-checkpoint: a running engine becomes a checkpoint image that travels
# through a registry and restores with a plain `nerdctl run`, woken by the
# injected helper; inspect and check read it; bad input leaves nothing.

load helpers

setup_file() {
	need_built oci-checkpoint
	stack_up
	load_image base
	load_image cpu-engine
	export CONTAINERD_ADDRESS=$RK_DIR/containerd.sock
	registry_up
}

# Every test's containers and images go, and the tmpfs the full-disk tests
# mount, also when the test failed half way: the next test starts from the
# engine and base images alone.
teardown() {
	[ -n "${RK_DIR:-}" ] || return 0
	local m
	for m in "$BATS_TEST_TMPDIR/small" "$RK_DIR/root/io.containerd.content.v1.content/ingest"; do
		if mountpoint -q "$m" 2>/dev/null; then
			umount "$m" || umount -l "$m" || true
		fi
	done
	remove_containers
	remove_images '*' "$BASE_IMAGE" "$ENGINE_IMAGE"
}

teardown_file() {
	[ -n "${REGISTRY_DIR:-}" ] && registry_stop "$REGISTRY_DIR"
	stack_down
}

# registry_up: a registry on a loopback port, storage in the file's temp dir.
registry_up() {
	export REGISTRY_PORT REGISTRY_DIR=$BATS_FILE_TMPDIR/registry
	REGISTRY_PORT=$(free_port)
	registry_start "$REGISTRY_DIR" "$REGISTRY_PORT"
}

# status_of NAME: the wake helper's /.rekindle/status in container NAME.
status_of() {
	"$REKINDLE_ROOT/scripts/nerdctl.sh" "$RK_DIR" exec "$1" cat /.rekindle/status 2>/dev/null
}

# checkpointed NAME IMAGE [--push]: an engine started as NAME, checkpointed
# into IMAGE (and pushed to the registry, with --push), then removed.
checkpointed() {
	local port
	port=$(free_port)
	start_engine "$1" "$port"
	ocicp create "$1" "$2"
	[ "${3:-}" != --push ] || run_nerdctl push --insecure-registry "$2"
	run_nerdctl rm -f "$1"
}

# restored NAME PORT IMAGE WHAT [RUN FLAGS...]: nerdctl run (with RUN FLAGS)
# restores IMAGE as container NAME on host port PORT, and its wake helper
# says it resumed the engine (checked as WHAT).
restored() {
	local name=$1 port=$2 image=$3 what=$4
	shift 4
	run_nerdctl run -d "$@" --name "$name" -p "127.0.0.1:$port:30000" "$image"
	wait_for "the wake helper's status" 30 status_of "$name"
	is "$(jq -r .outcome <<<"$(status_of "$name")")" "resumed" "$what"
}

# no_container NAME: nerdctl knows no container NAME.
no_container() {
	run_nerdctl ps -a --format '{{.Names}}'
	! grep -qx "$1" <<<"$output"
}

@test "a checkpoint image goes through a registry and nerdctl run resumes it" {
	local port reg=127.0.0.1:$REGISTRY_PORT/rekindle/ckpt:engine
	port=$(free_port)
	start_engine src "$port"
	local before pid0 start0 c0
	before=$(engine POST "$port" /generate "$PROMPT" | jq -r .text)
	answered "before the checkpoint" "$before"
	pid0=$(state_of "$port" pid)
	start0=$(state_of "$port" start_time)
	c0=$(state_of "$port" counter)

	ocicp create --json src "$reg"
	local json=${output#*$'\n{'}
	json="{${json}"
	for p in health quiesce inject-helper record dump package; do
		[[ $output == *"==> $p done in "* ]] || die "no time printed for phase $p"
	done
	is "$(jq -r .image <<<"$json")" "$reg" "image name in --json"
	is "$(jq -r '.gpus | length' <<<"$json")" "0" "GPUs recorded on a CPU host"
	# Stopped and its task deleted, which gives back its address and ports.
	run_nerdctl ps -a --filter name=src --format '{{.Status}}'
	is "${lines[-1]}" "Created" "the checkpoint stopped the engine container"

	run_nerdctl push --insecure-registry "$reg"
	run_nerdctl rm -f src
	run_nerdctl rmi "$reg"
	run_nerdctl pull --insecure-registry "$reg"

	port=$(free_port)
	run_nerdctl run -d --name dst -p "127.0.0.1:$port:30000" "$reg"
	wait_for "the wake helper's status" 30 status_of dst
	local status
	status=$(status_of dst)
	is "$(jq -r .outcome <<<"$status")" "resumed" "helper outcome in /.rekindle/status"
	is "$(jq -r '.calls[0].call' <<<"$status")" "POST /resume_memory_occupation {}" "resume call"
	is "$(state_of "$port" loaded)" "true" "weights reloaded by the helper"
	is "$(state_of "$port" pid)" "$pid0" "same engine process"
	is "$(state_of "$port" start_time)" "$start0" "restored, not restarted"
	[ "$(state_of "$port" counter)" -ge "$c0" ] || die "counter went back"
	is "$(engine POST "$port" /generate "$PROMPT" | jq -r .text)" "$before" "greedy output after restore"
	weights_intact "$port" dst
	run_nerdctl logs dst
	[[ $output == *"rekindle-wake: engine sglang resumed in"* ]] || die "the helper's outcome is not in the container's log"
	grep -q "restored from checkpoint image $reg: container-setup=" "$RK_DIR/containerd.log" ||
		die "containerd logged no restore phase times"
	run_nerdctl rm -f dst
}

# manifest_of IMAGE: the manifest of IMAGE in the local store.
manifest_of() {
	local c=("$BIN/ctr" -a "$CONTAINERD_ADDRESS")
	"${c[@]}" content get "$("${c[@]}" images ls | awk -v i="$1" '$1 == i {print $3}')"
}

# erofs_mounts: the EROFS mounts under this containerd's state directory.
erofs_mounts() {
	findmnt -rn -t erofs -o TARGET,SOURCE | awk -v d="$RK_DIR/" 'index($1, d) == 1' || true
}

no_erofs_mounts() {
	[ -z "$(erofs_mounts)" ]
}

# containerd-patches/diff-apply-keep-a-layer-that-asks-for-it-as-an-EROFS and containerd-patches/checkpointimage-read-a-checkpoint-layer-kept-in-plac: the uncompressed checkpoint layer is
# kept as an EROFS tar index over its blob when nerdctl unpacks it, and
# the restore reads the memory pages from the blob through that mount.
@test "nerdctl run reads an uncompressed checkpoint layer in place; the mount goes with the image" {
	local port image=rekindle.local/ckpt:in-place layer before
	port=$(free_port)
	start_engine ipsrc "$port"
	before=$(engine POST "$port" /generate "$PROMPT" | jq -r .text)
	answered "before the checkpoint" "$before"
	ocicp create --quiet ipsrc "$image"
	run_nerdctl rm -f ipsrc
	is "$(manifest_of "$image" | jq -r '.layers[0].annotations["org.rekindle.layer.in-place"]')" "erofs" "layer annotation"
	layer=$(manifest_of "$image" | jq -r '.layers[0].digest')
	no_erofs_mounts || die "EROFS mounts before the restore: $(erofs_mounts)"

	# The first restore from a cold page cache: the blob is mounted with
	# directio, and the pages are read ahead from task create on.
	sync
	echo 3 >/proc/sys/vm/drop_caches
	local p ahead ahead_lines
	ahead_lines=$(grep -c 'checkpoint read-ahead: read [0-9]* MiB of [1-9][0-9]* MiB' "$RK_DIR/containerd.log" || true)
	for p in 1 2 3; do
		# A containerd restarted between restores finds the mount again.
		[ "$p" != 3 ] || stack_restart
		port=$(free_port)
		restored "ipdst$p" "$port" "$image" "helper outcome, restore $p"
		is "$(engine POST "$port" /generate "$PROMPT" | jq -r .text)" "$before" "greedy output after restore $p"
		# What a cached restore reads ahead depends on what the host's
		# memory pressure left cached (the unit tests check that cached
		# chunks are skipped); every restore starts one.
		is "$(grep -c 'checkpoint read-ahead: read [0-9]* MiB of [1-9][0-9]* MiB' "$RK_DIR/containerd.log")" "$((ahead_lines + p))" "read-ahead log lines after restore $p"
		ahead=$(grep -o 'checkpoint read-ahead: read [0-9]* MiB of [0-9]* MiB' "$RK_DIR/containerd.log" | tail -1)
		[ "$p" != 1 ] || [[ $ahead =~ read\ [1-9][0-9]*\ MiB\ of ]] || die "restore 1, cold: the pages were not read ahead: '$ahead'"
	done
	grep -q "checkpoint layer $layer in place (EROFS tar index over its blob, direct I/O: " "$RK_DIR/containerd.log" ||
		die "the cold blob was not mounted with directio: $(grep -o 'mounted checkpoint layer [^"]*' "$RK_DIR/containerd.log")"
	is "$(grep -c "checkpoint layer $layer in place (EROFS tar index over its blob, buffered: " "$RK_DIR/containerd.log")" "0" "mounts of the cold blob without directio"
	is "$(grep -c "checkpoint layer $layer, read in place through its EROFS tar index" "$RK_DIR/containerd.log")" "1" "layer read in place"
	is "$(grep -c "stored extracted checkpoint of checkpoint layer $layer" "$RK_DIR/containerd.log")" "0" "extractions"
	is "$(erofs_mounts | wc -l)" "1" "one mount for the three restores"
	[[ $(erofs_mounts) == *"/layer.erofs" ]] || die "the mount is not the layer's index: $(erofs_mounts)"
	local snap
	snap=$(dirname "$(erofs_mounts | awk '{print $2}')")
	is "$(ls "$snap" | tr '\n' ' ')" "layer.erofs layer.tar " "the unpacked snapshot"
	is "$(stat -c %i "$snap/layer.tar")" "$(stat -c %i "$RK_DIR/root/io.containerd.content.v1.content/blobs/sha256/${layer#sha256:}")" "the snapshot links the blob"

	run_nerdctl rm -f ipdst1 ipdst2 ipdst3
	run_nerdctl rmi "$image"
	wait_for "GC to unmount the layer" 30 no_erofs_mounts
}

@test "inspect and check read the manifest, locally and from the registry" {
	local reg=127.0.0.1:$REGISTRY_PORT/rekindle/ckpt:inspect
	checkpointed isrc "$reg" --push

	ocicp inspect --json "$reg"
	is "$(jq -r .local <<<"$output")" "true" "found locally"
	is "$(jq -r .engine <<<"$output")" "sglang" "engine"
	is "$(jq -r .base_image <<<"$output")" "$ENGINE_IMAGE" "base image"
	is "$(jq -r .restorable_here <<<"$output")" "true" "restorable on the host that made it"
	jq -e 'any(.phases[]; .name == "dump" and .seconds > 0)' <<<"$output" >/dev/null || die "no dump time in the annotations"
	jq -e '.annotations["org.rekindle.criu.version"] | test("^[0-9]+[.]")' <<<"$output" >/dev/null ||
		die "no CRIU version recorded"
	grep -q "$(jq -r '.annotations["org.rekindle.cpu.model"]' <<<"$output")" /proc/cpuinfo ||
		die "recorded CPU model is not this host's"

	# Not in the local store: only the manifest comes from the registry.
	run_nerdctl rmi "$reg"
	ocicp check "$reg"
	is "${lines[-1]}" "$reg: this host can restore it" "check against the registry"
	run_nerdctl images --format '{{.Repository}}:{{.Tag}}'
	[[ $output != *"rekindle/ckpt:inspect"* ]] || die "check pulled the image"
}

# json_doc: the last JSON object of output (create --json prints its
# phases' lines first).
json_doc() {
	sed -n '/^{/,/^}/p' <<<"$output"
}

@test "--json: one schema (docs/json.md) for create, inspect, check, ls and memory; inspect's phases in the order they ran, base image with its digest" {
	local port image=rekindle.local/ckpt:json reg=127.0.0.1:$REGISTRY_PORT/rekindle/ckpt:json
	local created inspected doc names
	port=$(free_port)
	start_engine jsrc "$port"
	ocicp create --json jsrc "$image"
	created=$(json_doc)
	run_nerdctl rm -f jsrc
	ocicp inspect --json "$image"
	inspected=$output
	for doc in "$created" "$inspected"; do
		jq -e '.schema_version == 1 and (.phases | type == "array") and (.gpus | type == "array")' <<<"$doc" >/dev/null ||
			die "not schema_version 1 with phases and gpus arrays: $doc"
	done
	names=$(jq -r '[.phases[].name] | join(" ")' <<<"$created")
	is "$names" "health preflight quiesce inject-helper record dump package stop" "create's phases, in the order they ran"
	is "$(jq -r '[.phases[].name] | join(" ")' <<<"$inspected")" "$names" "inspect's phases: create's, in the order they ran, package and stop included"
	local f
	for f in image digest size engine base_image base_digest; do
		is "$(jq -r ".$f" <<<"$inspected")" "$(jq -r ".$f" <<<"$created")" "inspect's $f is create's"
	done
	run_ctr images ls "name==$ENGINE_IMAGE"
	[[ $output == *"$(jq -r .base_digest <<<"$inspected")"* ]] || die "base_digest is not the base image's digest: $inspected"
	ocicp inspect "$image"
	[[ $output == *"Base image:  $ENGINE_IMAGE (digest $(jq -r .base_digest <<<"$inspected"))"* ]] || die "inspect does not show the base image's digest"
	[[ $output == *"Checkpoint:  health "*" preflight "*" dump "*" package "*" stop "* ]] || die "inspect's phases are not in the order they ran"

	ocicp check --json "$image"
	jq -e '.schema_version == 1 and .restorable_here' <<<"$(json_doc)" >/dev/null || die "check --json: $output"
	ocicp ls --json
	jq -e --arg i "$image" --argjson c "$created" \
		'.schema_version == 1 and (.images[] | select(.image == $i) | .digest == $c.digest and .size == $c.size and .base_digest == $c.base_digest)' \
		<<<"$output" >/dev/null || die "ls --json does not name the image, digest, size and base digest as create: $output"
	ocicp memory --json "$image"
	jq -e --arg i "$image" '.schema_version == 1 and .image == $i' <<<"$output" >/dev/null || die "memory --json: no schema_version or image"

	# From the registry, the manifest's phases: to package (stop came
	# after the manifest was written).
	run_nerdctl tag "$image" "$reg"
	run_nerdctl push --insecure-registry "$reg"
	run_nerdctl rmi "$reg"
	ocicp inspect --json "$reg"
	is "$(jq -r '[.phases[].name] | join(" ")' <<<"$output")" "${names% stop}" "a registry image's phases: to package"
	is "$(jq -r .digest <<<"$output")" "$(jq -r .digest <<<"$created")" "a registry image's digest"
	run_nerdctl rmi "$image"
}

@test "memory names the process and the mapping that hold a checkpoint's pages; an image only in a registry is refused" {
	local port image=rekindle.local/ckpt:memory reg=127.0.0.1:$REGISTRY_PORT/rekindle/ckpt:memory
	port=$(free_port)
	# The engine keeps ENGINE_STATE_MB of state in one anonymous mapping.
	start_engine msrc "$port" -e ENGINE_STATE_MB=96
	ocicp create msrc "$image"
	run_nerdctl rm -f msrc
	ocicp memory --json "$image"
	local engine
	engine=$(jq -c '.processes[0]' <<<"$output")
	is "$(jq -r .pid <<<"$engine")" 1 "the engine (pid 1 in its container) holds the most pages"
	jq -e '.bytes >= 96 * 1048576' <<<"$engine" >/dev/null || die "the engine's pages are under its 96 MiB of state: $engine"
	jq -e '.mappings[0] | .resource == "" and .bytes >= 96 * 1048576 and .prot == "rw-"' <<<"$engine" >/dev/null ||
		die "the biggest mapping is not the 96 MiB of anonymous state: $(jq -c '.mappings[0]' <<<"$engine")"
	jq -e '.pages_files_bytes >= ([.processes[].bytes] | add)' <<<"$output" >/dev/null ||
		die "the pages files hold less than the processes' pages: $output"
	ocicp memory "$image"
	[[ ${lines[0]} == "$image: "*" MiB of pages files ("*" MiB of them pages of zeros); "* ]] || die "no summary line: ${lines[0]}"
	[[ $output == *"pid 1 "*"anonymous"* ]] || die "the engine's anonymous mapping is not shown"

	run_nerdctl tag "$image" "$reg"
	run_nerdctl push --insecure-registry "$reg"
	run_nerdctl rmi "$reg" "$image"
	ocicp 1 memory "$reg"
	is "$output" "~is not in containerd's image store: pull it first" "a registry image is refused with the fix"
}

@test "pages of zeros: left out of the image by default, kept with --keep-zero-pages, and restored as zeros either way" {
	local port keep=rekindle.local/ckpt:zeros-kept sparse=rekindle.local/ckpt:zeros-out sum0 pid0 text0
	port=$(free_port)
	# 96 MiB of state, every other MiB zeros: 48 MiB of pages of zeros.
	start_engine zsrc "$port" -e ENGINE_STATE_MB=96 -e ENGINE_STATE_HALF_ZERO=1
	sum0=$(engine GET "$port" "/state?verify=1" | jq -r .state_sha256)
	text0=$(engine POST "$port" /generate "$PROMPT" | jq -r .text)
	pid0=$(state_of "$port" pid)
	ocicp create --keep-zero-pages zsrc "$keep"
	run_nerdctl rm -f zsrc
	ocicp memory --json "$keep"
	local kept_zero kept_pages
	kept_zero=$(jq .pages_files_zero_bytes <<<"$output")
	kept_pages=$(jq .pages_files_bytes <<<"$output")
	[ "$kept_zero" -ge $((47 << 20)) ] || die "--keep-zero-pages: $kept_zero bytes of zero pages stored, want the state's 48 MiB"

	# Restored, then checkpointed again with the default: the zeros go.
	run_nerdctl run -d --name zmid -p "127.0.0.1:$port:30000" "$keep"
	wait_for "the restored engine to answer" 60 engine GET "$port" /state
	is "$(engine GET "$port" "/state?verify=1" | jq -r .state_sha256)" "$sum0" "the kept zeros restored"
	ocicp create zmid "$sparse"
	run_nerdctl rm -f zmid
	ocicp memory --json "$sparse"
	[ "$(jq .pages_files_zero_bytes <<<"$output")" -le $((1 << 20)) ] ||
		die "the default image still stores $(jq .pages_files_zero_bytes <<<"$output") bytes of zero pages"
	[ "$(jq .pages_files_bytes <<<"$output")" -le $((kept_pages - (47 << 20))) ] ||
		die "the default image's pages ($(jq .pages_files_bytes <<<"$output")) are not 48 MiB under the kept ones ($kept_pages)"

	run_nerdctl run -d --name zdst -p "127.0.0.1:$port:30000" "$sparse"
	wait_for "the restored engine to answer" 60 engine GET "$port" /state
	is "$(state_of "$port" pid)" "$pid0" "same engine process"
	is "$(engine GET "$port" "/state?verify=1" | jq -r .state_sha256)" "$sum0" "the state, zeros and all, restored from the image without them"
	weights_intact "$port" zdst
	is "$(engine POST "$port" /generate "$PROMPT" | jq -r .text)" "$text0" "greedy output after restore"
}

@test "checkpointctl inspects the checkpoint archive" {
	local image=rekindle.local/ckpt:interop layer
	checkpointed csrc "$image"
	layer=$("$BIN/oci-checkpoint" inspect --json "$image" | jq -r .layer_digest)
	"$BIN/ctr" --address "$RK_DIR/containerd.sock" -n default content get "$layer" >"$BATS_TEST_TMPDIR/checkpoint.tar"

	# checkpointctl names containerd containers only from CRI's annotations,
	# which nerdctl containers lack; the image, runtime and sizes it shows.
	run_cmd "$BIN/checkpointctl" show "$BATS_TEST_TMPDIR/checkpoint.tar"
	[[ $output == *"$ENGINE_IMAGE"*"io.containerd.runc.v2"*containerd* ]] || die "checkpointctl show lacks the base image or runtime"
	run_cmd "$BIN/checkpointctl" inspect --format json "$BATS_TEST_TMPDIR/checkpoint.tar"
	jq -e . <<<"$output" >/dev/null || die "checkpointctl inspect printed no JSON"
}

@test "a failing quiesce call: create refuses, the engine keeps serving, no image" {
	local port image=rekindle.local/ckpt:refused
	port=$(free_port)
	start_engine qsrc "$port"
	ocicp 1 create --engine generic --port 30000 \
		--quiesce 'POST /flush_cache' --quiesce 'POST /no_such_endpoint' \
		--resume 'POST /resume_memory_occupation' qsrc "$image"
	[[ $output == *"quiesce: POST /no_such_endpoint answered 404"* ]] || die "error does not name the failing call"
	[[ $output == *"the engine is left running"* ]] || die "error does not say the engine runs"
	run_nerdctl inspect -f '{{.State.Status}}' qsrc
	is "${lines[-1]}" "running" "engine container after the refused checkpoint"
	is "$(state_of "$port" loaded)" "true" "weights still loaded"
	engine POST "$port" /generate "$PROMPT" >/dev/null || die "engine stopped serving"
	run_nerdctl 1 image inspect "$image"

	# vLLM's sleep endpoint is absent unless the server runs in dev mode:
	# the error says how to start it.
	ocicp 1 create --engine vllm --port 30000 qsrc "$image"
	[[ $output == *"VLLM_SERVER_DEV_MODE=1"* ]] || die "missing /sleep endpoint not explained"
	run_nerdctl rm -f qsrc
}

@test "a failure after the quiesce resumes the engine and leaves no image" {
	local port image=rekindle.local/ckpt:half
	port=$(free_port)
	start_engine hsrc "$port"
	# A work dir that cannot be created is refused before the engine is
	# touched: create makes it first, to record what it does there.
	ocicp 1 create --work-dir /proc/no-such-dir hsrc "$image"
	[[ $output == *"work directory: stat /proc/no-such-dir"* ]] || die "error does not name the work dir"
	is "$(state_of "$port" releases)" "0" "releases of the engine refused for its work dir"
	# A helper that exits at once fails the inject-helper phase, after the
	# engine was quiesced.
	ocicp 1 create --wake-binary /bin/false hsrc "$image"
	[[ $output == *"start the wake helper"* ]] || die "error does not name the helper's start"
	[[ $output == *"the engine was resumed and is running"* ]] || die "error does not say the engine was resumed"
	is "$(state_of "$port" loaded)" "true" "weights reloaded after the failed checkpoint"
	engine POST "$port" /generate "$PROMPT" >/dev/null || die "engine stopped serving"
	run_nerdctl 1 image inspect "$image"
	run_nerdctl rm -f hsrc
}

@test "--compression zstd writes a zstd checkpoint layer that nerdctl run restores; a bad value is refused" {
	local port image=rekindle.local/ckpt:zstd
	ocicp 2 create --compression gzip nosuch "$image"
	[[ $output == *'--compression "gzip": want none, pages or zstd'* ]] || die "bad --compression not explained"

	port=$(free_port)
	start_engine zsrc "$port"
	local before
	before=$(engine POST "$port" /generate "$PROMPT" | jq -r .text)
	answered "before the checkpoint" "$before"
	ocicp create --quiet --compression zstd zsrc "$image"
	[[ $output != *"==> "* ]] || die "--quiet printed phases"
	local manifest
	manifest=$("$BIN/ctr" -a "$CONTAINERD_ADDRESS" images ls -q | grep -qx "$image" &&
		"$BIN/ctr" -a "$CONTAINERD_ADDRESS" content get "$("$BIN/ctr" -a "$CONTAINERD_ADDRESS" images ls | awk -v i="$image" '$1 == i {print $3}')")
	is "$(jq -r '.layers[0].mediaType' <<<"$manifest")" "application/vnd.oci.image.layer.v1.tar+zstd" "layer media type"
	is "$(jq -r '.layers[0].annotations' <<<"$manifest")" "null" "no in-place annotation on a compressed layer"
	ocicp inspect --json "$image"
	is "$(jq -r .compression <<<"$output")" "zstd" "inspect's compression"
	run_nerdctl rm -f zsrc
	port=$(free_port)
	restored zdst "$port" "$image" "helper outcome"
	is "$(engine POST "$port" /generate "$PROMPT" | jq -r .text)" "$before" "greedy output after a restore from a zstd layer"
	run_nerdctl rm -f zdst
	run_nerdctl rmi "$image"
}

@test "--compression pages compresses the pages images inside a layer read in place; nerdctl run decodes them into memory for the restore and lets it go" {
	local port image=rekindle.local/ckpt:pages
	port=$(free_port)
	start_engine psrc "$port"
	local before
	before=$(engine POST "$port" /generate "$PROMPT" | jq -r .text)
	answered "before the checkpoint" "$before"
	ocicp create --quiet --compression pages psrc "$image"
	local manifest layer
	manifest=$(manifest_of "$image")
	is "$(jq -r '.layers[0].mediaType' <<<"$manifest")" "application/vnd.oci.image.layer.v1.tar" "layer media type"
	is "$(jq -r '.layers[0].annotations."org.rekindle.layer.in-place"' <<<"$manifest")" "erofs" "the layer is read in place"
	is "$(jq -r '.layers[0].annotations."org.rekindle.layer.pages"' <<<"$manifest")" "zstd" "the layer says its pages are compressed"
	ocicp inspect --json "$image"
	is "$(jq -r .compression <<<"$output")" "pages" "inspect's compression"
	layer=$("$BIN/ctr" -a "$CONTAINERD_ADDRESS" content get "$(jq -r '.layers[0].digest' <<<"$manifest")" | tar -t)
	grep -q '^checkpoint/pages-[0-9]*\.img\.zst$' <<<"$layer" || die "no compressed pages image in the layer: $(grep pages <<<"$layer")"
	! grep -q '^checkpoint/pages-[0-9]*\.img$' <<<"$layer" || die "an uncompressed pages image is in the layer too"
	ocicp memory "$image"
	[[ $output == *"MiB of pages files"* ]] || die "oci-checkpoint memory cannot read the compressed pages: $output"
	run_nerdctl rm -f psrc

	port=$(free_port)
	restored pdst "$port" "$image" "helper outcome"
	is "$(engine POST "$port" /generate "$PROMPT" | jq -r .text)" "$before" "greedy output after a restore from compressed pages"
	logged "decoded [0-9]* compressed pages images"
	! grep -q criu-pages /proc/self/mountinfo || die "the decoded pages are still mounted: $(grep criu-pages /proc/self/mountinfo)"
	run_nerdctl rm -f pdst
	run_nerdctl rmi "$image"
}

# gc_removed LAYER: cache-gc --max-size 0 leaves of LAYER's entry only
# the data view of the image's unpacked snapshot, which stays with the image.
gc_removed() {
	"$REKINDLE_ROOT/systemd/rekindle-cache-gc.sh" --address "$CONTAINERD_ADDRESS" -n default --max-size 0 >/dev/null &&
		! "$BIN/ctr" --address "$CONTAINERD_ADDRESS" -n default snapshots ls | grep "^checkpoint-cache/$1/" | grep -qv "^checkpoint-cache/$1/data-view "
}

# decodes: how many times the runc shim has decoded compressed pages images.
decodes() {
	grep -c "decoded [0-9]* compressed pages images" "$RK_DIR/containerd.log" || true
}

@test "--compression pages: once restored, the cache keeps the pages decoded; a restore reads them while in the page cache, else decodes the compressed ones" {
	local port image=rekindle.local/ckpt:pages-decoded before n layer
	port=$(free_port)
	start_engine pcsrc "$port" -e ENGINE_STATE_MB=32
	before=$(engine POST "$port" /generate "$PROMPT" | jq -r .text)
	answered "before the checkpoint" "$before"
	ocicp create --quiet --compression pages pcsrc "$image"
	run_nerdctl rm -f pcsrc
	layer=$(jq -r '.layers[0].digest' <<<"$(manifest_of "$image")")

	n=$(decodes)
	port=$(free_port)
	restored pc1 "$port" "$image" "first restore"
	is "$(engine POST "$port" /generate "$PROMPT" | jq -r .text)" "$before" "greedy output of the first restore"
	[ "$(decodes)" -gt "$n" ] || die "the first restore did not decode the compressed pages"
	run_nerdctl rm -f pc1
	wait_for "the cache's decoded copy of the pages" 60 logged "decoded the pages images of checkpoint layer $layer, [0-9]* MiB, in [0-9.]*s, for its next restores"

	n=$(decodes)
	port=$(free_port)
	restored pc2 "$port" "$image" "restore from the decoded copy"
	is "$(engine POST "$port" /generate "$PROMPT" | jq -r .text)" "$before" "greedy output of a restore from the decoded copy"
	logged "restoring from the decoded pages images of checkpoint layer $layer"
	is "$(decodes)" "$n" "decodes by the shim for a restore from the decoded copy"
	run_nerdctl rm -f pc2

	# Out of the page cache, the copy is more bytes to read than the
	# compressed images: those are read and decoded.
	sync
	echo 1 >/proc/sys/vm/drop_caches
	n=$(decodes)
	port=$(free_port)
	restored pc3 "$port" "$image" "restore after the page cache was dropped"
	is "$(engine POST "$port" /generate "$PROMPT" | jq -r .text)" "$before" "greedy output after the page cache was dropped"
	logged "of the decoded pages images of checkpoint layer $layer are in the page cache: restoring from the compressed ones"
	[ "$(decodes)" -gt "$n" ] || die "the restore after the page cache was dropped did not decode"
	run_nerdctl rm -f pc3
	"$BIN/ctr" --address "$CONTAINERD_ADDRESS" -n default snapshots ls | grep -q "^checkpoint-cache/$layer/decoded " ||
		die "no decoded copy in the cache"
	! "$BIN/ctr" --address "$CONTAINERD_ADDRESS" -n default snapshots ls | grep -q "^checkpoint-restore/.*/decoded " ||
		die "a restore's hold of the decoded copy is left"
	# The cache GC takes the copy with the rest of the entry (once the
	# removed containers' snapshots are collected).
	wait_for "cache-gc to remove the entry, its decoded copy with it" 30 gc_removed "$layer"
	port=$(free_port)
	restored pc4 "$port" "$image" "restore after cache-gc"
	is "$(engine POST "$port" /generate "$PROMPT" | jq -r .text)" "$before" "greedy output after cache-gc"
	run_nerdctl rm -f pc4
	run_nerdctl rmi "$image"
}

@test "a full disk during the dump names ENOSPC and the path; the engine keeps serving" {
	local port image=rekindle.local/ckpt:full-dump work=$BATS_TEST_TMPDIR/small
	port=$(free_port)
	start_engine fdsrc "$port"
	mkdir -p "$work"
	mount -t tmpfs -o size=4m tmpfs "$work"
	ocicp 1 create --work-dir "$work" fdsrc "$image"
	umount "$work"
	[[ $output == *"no space left on device (ENOSPC) in $work/oci-checkpoint-"* ]] || die "error does not name ENOSPC and the work dir"
	[[ $output == *"the engine was resumed and is running"* ]] || die "error does not say the engine was resumed"
	engine POST "$port" /generate "$PROMPT" >/dev/null || die "engine stopped serving"
	run_nerdctl 1 image inspect "$image"
	run_nerdctl rm -f fdsrc
}

@test "a full content store during packaging names ENOSPC and the path, leaves no image or ingest, and the engine keeps serving" {
	local port image=rekindle.local/ckpt:full-package ingest=$RK_DIR/root/io.containerd.content.v1.content/ingest
	[ -d "$ingest" ] || die "no content store ingest dir at $ingest"
	port=$(free_port)
	start_engine fpsrc "$port"
	mount -t tmpfs -o size=4m tmpfs "$ingest"
	ocicp 1 create fpsrc "$image"
	local left
	left=$(ls -A "$ingest")
	umount "$ingest"
	[[ $output == *"no space left on device (ENOSPC) in $RK_DIR/root/io.containerd.content.v1.content"* ]] || die "error does not name ENOSPC and the content store"
	[[ $output == *"the engine was resumed and is running"* ]] || die "error does not say the engine was resumed"
	is "$left" "" "ingests left in the content store"
	engine POST "$port" /generate "$PROMPT" >/dev/null || die "engine stopped serving"
	run_nerdctl inspect -f '{{.State.Status}}' fpsrc
	is "${lines[-1]}" "running" "engine container after the failed packaging"
	run_nerdctl 1 image inspect "$image"
	run_nerdctl rm -f fpsrc
}

@test "--stop-at-dump ends the container with the dump; a failed packaging then says how to start it again" {
	local port image=rekindle.local/ckpt:stop-at-dump ingest=$RK_DIR/root/io.containerd.content.v1.content/ingest
	ocicp 2 create --stop-at-dump --leave-running nosuch "$image"
	[[ $output == *"contradict each other"* ]] || die "--stop-at-dump with --leave-running not refused"

	port=$(free_port)
	start_engine sdsrc "$port"
	ocicp create --stop-at-dump sdsrc "$image"
	[[ $output != *"==> stop "* ]] || die "a stop phase ran after --stop-at-dump"
	run_nerdctl ps -a --filter name=sdsrc --format '{{.Status}}'
	is "${lines[-1]}" "Created" "the dump stopped the engine container, its task deleted"
	run_nerdctl image inspect "$image"
	run_nerdctl rm -f sdsrc

	start_engine sdsrc2 "$port"
	mount -t tmpfs -o size=4m tmpfs "$ingest"
	ocicp 1 create --stop-at-dump sdsrc2 "$image-2"
	umount "$ingest"
	[[ $output == *"the container was stopped by the dump (--stop-at-dump): restart it with 'nerdctl start sdsrc2'"* ]] ||
		die "the error does not say the dump stopped the container and how to start it"
	run_nerdctl 1 image inspect "$image-2"
}

@test "bad input: unknown container, bad image name, generic without calls" {
	ocicp 1 create nosuch rekindle.local/x:1
	[[ $output == *'no container "nosuch"'* ]] || die "unknown container not named"
	ocicp 2 create --engine generic --port 1 nosuch rekindle.local/x:1
	[[ $output == *"needs --quiesce and --resume"* ]] || die "generic without calls not explained"
	# Each --quiesce or --resume is one call, whole, checked before anything
	# is done: a JSON body's commas stay in it; a GET with a body is refused.
	ocicp 1 create --engine generic --port 1 --quiesce 'POST /x {"a": 1, "b": 2}' --resume 'POST /y' nosuch rekindle.local/x:1
	[[ $output == *'no container "nosuch"'* ]] || die "a body with a comma was not taken whole"
	ocicp 2 create --engine generic --port 1 --quiesce 'GET /health extra' --resume 'POST /y' nosuch rekindle.local/x:1
	[[ $output == *'"GET /health extra": GET takes no body'*"want 'GET /path', 'POST /path [JSON]' or 'exec COMMAND'"* ]] ||
		die "a GET with something after its path is not refused with the value and the forms"
	ocicp 1 create nosuch 'Bad Name'
	[[ $output == *'image name "Bad Name"'* ]] || die "bad image name not named"
	ocicp 1 --address /nonexistent.sock inspect x
	[[ $output == *"no containerd socket at /nonexistent.sock"* ]] || die "missing socket not explained"
}

@test "check refuses an image that needs a CPU flag this host lacks" {
	local image=rekindle.local/ckpt:cpu crafted=rekindle.local/ckpt:needs-avx9000
	checkpointed fsrc "$image"
	run_nerdctl save -o "$BATS_TEST_TMPDIR/img.tar" "$image"
	needs_avx9000 "$BATS_TEST_TMPDIR/img.tar" "$BATS_TEST_TMPDIR/crafted.tar" "$crafted"
	run_nerdctl load -i "$BATS_TEST_TMPDIR/crafted.tar"
	ocicp 1 check "$crafted"
	[[ $output == *"lacks avx9000"* ]] || die "check does not name the missing flag"
	ocicp check "$image"
}

@test "a tampered layer is refused on pull and run, no container left" {
	local reg=127.0.0.1:$REGISTRY_PORT/rekindle/ckpt:tampered
	checkpointed tsrc "$reg" --push
	local layer
	layer=$("$BIN/oci-checkpoint" inspect --json "$reg" | jq -r .layer_digest)
	run_nerdctl rmi "$reg"

	# Flip bytes in the middle of the stored layer, keeping its size.
	local blob=$REGISTRY_DIR/docker/registry/v2/blobs/sha256/${layer:7:2}/${layer#sha256:}/data
	[ -f "$blob" ] || die "no registry blob at $blob"
	printf 'tampered' | dd of="$blob" bs=1 seek=4096 conv=notrunc status=none

	run_nerdctl 1 pull --insecure-registry "$reg"
	[[ $output == *"unexpected commit digest"* || $output == *"digest"* ]] || die "pull error does not name the digest"
	run_nerdctl '?' run -d --name tdst --insecure-registry "$reg"
	[ "$status" -ne 0 ] || die "nerdctl run of a tampered image succeeded"
	no_container tdst || die "a container was left behind"

	# Truncated: the registry serves fewer bytes than the manifest says.
	truncate -s 1000 "$blob"
	run_nerdctl '?' run -d --name tdst2 --insecure-registry "$reg"
	[ "$status" -ne 0 ] || die "nerdctl run of a truncated image succeeded"
	no_container tdst2 || die "a container was left behind"
}

@test "an established TCP connection fails the dump: the error quotes CRIU's cause, the log is kept until a dump succeeds, the engine resumes" {
	local port image=rekindle.local/ckpt:tcp
	port=$(free_port)
	start_engine tcpsrc "$port"
	# A client inside the container holds a connection to the engine open.
	run_nerdctl exec -d tcpsrc python3 -c \
		'import socket, time; s = socket.create_connection(("127.0.0.1", 30000)); time.sleep(600)'
	sleep 1
	ocicp 1 create tcpsrc "$image"
	[[ $output == *"dump: "* ]] || die "the error does not name the dump"
	[[ $output == *"CRIU: inet: Connected TCP socket, consider using --tcp-established option. (criu/sk-inet.c:"* ]] ||
		die "the error does not quote CRIU's line naming the connected socket"
	[[ $output != *"RLIMIT_NOFILE"* ]] || die "the error quotes the RLIMIT_NOFILE line CRIU goes on from"
	[[ $output == *"the engine was resumed and is running"* ]] || die "the error does not say the engine runs"
	local log
	log=$(grep -o "/[^ ]*oci-checkpoint-dump-tcpsrc-[0-9]*\.log" <<<"$output" | head -1)
	[ -f "$log" ] || die "CRIU's dump.log was not kept (output: $output)"
	grep -qi "tcp" "$log" || die "CRIU's log does not mention the TCP connection: $(grep Error "$log")"
	is "$(state_of "$port" loaded)" "true" "weights reloaded after the failed dump"
	run_nerdctl 1 image inspect "$image"
	run_nerdctl rm -f tcpsrc

	# The container's next dump succeeds: its failed dumps' logs go.
	start_engine tcpsrc "$port"
	ocicp create tcpsrc "$image"
	[ ! -e "$log" ] || { rm -f "$log"; die "the failed dump's log $log stayed after a dump that succeeded"; }
	run_nerdctl rm -f tcpsrc
}

@test "--output oci-archive writes an archive that nerdctl loads and restores" {
	local port image=rekindle.local/ckpt:archive archive=$BATS_TEST_TMPDIR/ckpt.tar
	port=$(free_port)
	start_engine asrc "$port"
	local before
	before=$(engine POST "$port" /generate "$PROMPT" | jq -r .text)
	answered "before the checkpoint" "$before"
	ocicp create --output "oci-archive:$archive" asrc "$image"
	[ -s "$archive" ] || die "no archive at $archive"
	[ ! -e "$archive.partial" ] || die "a partial archive was left behind"
	run_nerdctl 1 image inspect "$image"
	run_nerdctl rm -f asrc

	run_nerdctl load -i "$archive"
	port=$(free_port)
	restored adst "$port" "$image" "helper outcome"
	is "$(engine POST "$port" /generate "$PROMPT" | jq -r .text)" "$before" "greedy output after restore"
	run_nerdctl rm -f adst

	ocicp 2 create --output tar:/tmp/x asrc "$image"
	[[ $output == *"want oci-archive:PATH"* ]] || die "a bad --output is not explained"
}

# image_digest IMAGE: the manifest digest IMAGE names in the local store.
image_digest() {
	"$BIN/ctr" -a "$CONTAINERD_ADDRESS" images ls | awk -v i="$1" '$1 == i {print $3}'
}

@test "create refuses a missing --output folder and a name taken before it quiesces; --replace replaces a checkpoint image only" {
	local port image=rekindle.local/ckpt:taken archive=$BATS_TEST_TMPDIR/ckpt.tar first
	port=$(free_port)
	start_engine osrc "$port"
	ocicp 1 create --output "oci-archive:$BATS_TEST_TMPDIR/nosuch/ckpt.tar" osrc "$image"
	[[ $output == *"folder $BATS_TEST_TMPDIR/nosuch does not exist: create it first"* ]] || die "a missing --output folder is not named"
	[[ $output != *"==> "* ]] || die "create went on before refusing the --output folder"

	ocicp create --quiet --leave-running osrc "$image"
	first=$(image_digest "$image")
	ocicp 1 create --leave-running osrc "$image"
	[[ $output == *"image $image: already exists: remove it first ('oci-checkpoint rm $image'), or pass --replace"* ]] ||
		die "an image of that name is not refused with the fix"
	[[ $output != *"==> "* ]] || die "create went on before refusing the image name"
	is "$(image_digest "$image")" "$first" "the image after the refused create"
	ocicp create --quiet --leave-running --replace osrc "$image"
	[ "$(image_digest "$image")" != "$first" ] || die "--replace did not replace the image"

	ocicp 1 create --leave-running --replace osrc "$ENGINE_IMAGE"
	[[ $output == *"image $ENGINE_IMAGE: already exists and is not a checkpoint image"* ]] || die "--replace over a base image is not refused"
	ocicp 2 check "$ENGINE_IMAGE"
	[[ $output == *"is not a checkpoint image"* ]] || die "the base image was replaced"

	ocicp create --quiet --leave-running --output "oci-archive:$archive" osrc "$image"
	ocicp 1 create --leave-running --output "oci-archive:$archive" osrc "$image"
	[[ $output == *"--output oci-archive:$archive: already exists: remove it first, or pass --replace"* ]] || die "an existing archive is not refused"
	ocicp create --quiet --leave-running --replace --output "oci-archive:$archive" osrc "$image"
	is "$(state_of "$port" loaded)" "true" "the engine after the refusals"
	run_nerdctl rm -f osrc
}

@test "a restored engine checkpointed again restores again: the second image keeps the base image and the rootfs diff" {
	local port img1=rekindle.local/ckpt:gen1 img2=rekindle.local/ckpt:gen2
	port=$(free_port)
	start_engine gen0 "$port"
	local before start0 c0
	before=$(engine POST "$port" /generate "$PROMPT" | jq -r .text)
	answered "before the first checkpoint" "$before"
	start0=$(state_of "$port" start_time)
	ocicp create gen0 "$img1"
	run_nerdctl rm -f gen0
	restored gen1 "$port" "$img1" "first restore"
	c0=$(state_of "$port" counter)

	# The restored container runs the checkpoint image, and its files live
	# in containerd's restore snapshot: the second checkpoint must name the
	# first's base image and carry the whole rootfs diff (the wake helper's
	# binary, which CRIU needs to find again, is in it).
	ocicp create --json gen1 "$img2"
	local json=${output#*$'\n{'}
	is "$(jq -r .base_image <<<"{$json")" "$ENGINE_IMAGE" "the second checkpoint's base image"
	run_nerdctl rm -f gen1
	run_nerdctl rmi "$img1"
	restored gen2 "$port" "$img2" "second restore"
	is "$(state_of "$port" start_time)" "$start0" "the same engine process, twice restored"
	[ "$(state_of "$port" counter)" -ge "$c0" ] || die "counter went back"
	is "$(engine POST "$port" /generate "$PROMPT" | jq -r .text)" "$before" "greedy output after the second restore"
	run_nerdctl rm -f gen2
}

@test "a restore whose base image was pulled on demand can be checkpointed again, by the base's recorded digest" {
	local port base=127.0.0.1:$REGISTRY_PORT/rekindle/engine:fresh reg=127.0.0.1:$REGISTRY_PORT/rekindle/ckpt:fresh
	local again=rekindle.local/ckpt:fresh-again
	run_nerdctl tag "$ENGINE_IMAGE" "$base"
	run_nerdctl push --insecure-registry "$base"
	local digest
	digest=$("$BIN/ctr" -a "$CONTAINERD_ADDRESS" images ls | awk -v i="$base" '$1 == i {print $3}')
	[[ $digest == sha256:* ]] || die "no digest for $base: '$digest'"
	port=$(free_port)
	run_nerdctl run -d --name fr0 -p "127.0.0.1:$port:30000" "$base"
	wait_healthy "$port"
	local before
	before=$(engine POST "$port" /generate "$PROMPT" | jq -r .text)
	answered "before the checkpoint" "$before"
	ocicp create fr0 "$reg"
	run_nerdctl push --insecure-registry "$reg"
	run_nerdctl rm -f fr0
	# A host that has neither image by name: the restore pulls both, the base
	# on demand (containerd-patches/checkpointimage-resolve-the-base-image-locally-befor), which leaves no image record.
	run_nerdctl rmi "$reg" "$base"
	restored fr1 "$port" "$reg" "restore on a host without the base image" --insecure-registry
	run_nerdctl 1 image inspect "$base"

	ocicp create --json fr1 "$again"
	local json=${output#*$'\n{'}
	is "$(jq -r .base_image <<<"{$json")" "$base" "the new checkpoint's base image"
	is "$(jq -r '.annotations."org.criu.checkpoint.rootfsImageID"' <<<"{$json")" "$digest" "the base's digest, as the first checkpoint recorded it"
	run_nerdctl rm -f fr1
	restored fr2 "$port" "$again" "restore of the second checkpoint"
	is "$(engine POST "$port" /generate "$PROMPT" | jq -r .text)" "$before" "greedy output after both restores"
	run_nerdctl rm -f fr2
}
