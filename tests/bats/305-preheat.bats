#!/usr/bin/env bats
# Preheat (containerd-patches/tasks-keep-named-checkpoint-images-resident-checkpoi):
# containerd keeps the checkpoint images of checkpoint_preheat_images
# resident, their cache entries extracted and held, a compressed image's
# decoded copy made, and their pages images locked in its memory, within
# checkpoint_preheat_max_memory. A preheated image restores from memory
# after the page cache is dropped; one that does not fit says what it needs
# and restores from disk; a removed one is let go.

load helpers

PAGES=rekindle.local/preheat:pages
PLAIN=rekindle.local/preheat:plain

setup_file() {
	need_built oci-checkpoint
	stack_up
	load_image base
	load_image cpu-engine
	export CONTAINERD_ADDRESS=$RK_DIR/containerd.sock
	local port
	port=$(free_port)
	start_engine src "$port" -e ENGINE_STATE_MB=32
	engine POST "$port" /generate "$PROMPT" | jq -r .text >"$BATS_FILE_TMPDIR/before"
	answered "before the checkpoint" "$(cat "$BATS_FILE_TMPDIR/before")"
	"$BIN/oci-checkpoint" create --quiet --leave-running src "$PLAIN" 3>&-
	"$BIN/oci-checkpoint" create --quiet --compression pages src "$PAGES" 3>&-
	"$REKINDLE_ROOT/scripts/nerdctl.sh" "$RK_DIR" rm -f src >/dev/null
}

teardown() {
	[ -n "${RK_DIR:-}" ] || return 0
	remove_containers
}

teardown_file() {
	stack_down
}

# preheat IMAGES [MAX]: containerd restarted preheating the TOML list
# IMAGES within MAX, looking again every second.
preheat() {
	CONTAINERD_PREHEAT_IMAGES=$1 CONTAINERD_PREHEAT_MAX_MEMORY=${2:-} CONTAINERD_PREHEAT_INTERVAL=1s stack_restart
}

# preheat_state IMAGE: the preheat's record of IMAGE (its status file).
preheat_state() {
	jq -c --arg i "$1" '.images[] | select(.image == $i)' \
		"$RK_DIR/state/io.containerd.service.v1.tasks-service/checkpoint-preheat.json" 2>/dev/null
}

# in_state IMAGE STATE [SOURCE]: the preheat has IMAGE in STATE (from SOURCE).
in_state() {
	local s
	s=$(preheat_state "$1")
	[ "$(jq -r .state <<<"$s")" = "$2" ] && [[ "$(jq -r '.source // ""' <<<"$s")" == *"${3:-}"* ]]
}

# locked_kib: the memory containerd holds locked (VmLck), in KiB.
locked_kib() {
	awk '$1 == "VmLck:" {print $2}' "/proc/$(cat "$RK_DIR/containerd.pid")/status"
}

layer_of() {
	local c=("$BIN/ctr" -a "$CONTAINERD_ADDRESS")
	"${c[@]}" content get "$("${c[@]}" images ls | awk -v i="$1" '$1 == i {print $3}')" | jq -r '.layers[0].digest'
}

decodes() {
	grep -c "decoded [0-9]* compressed pages images" "$RK_DIR/containerd.log" || true
}

# restored NAME IMAGE WHAT: IMAGE restored as NAME answers as before.
restored() {
	local port
	port=$(free_port)
	run_nerdctl run -d --name "$1" -p "127.0.0.1:$port:30000" "$2"
	wait_healthy "$port"
	is "$(engine POST "$port" /generate "$PROMPT" | jq -r .text)" "$(cat "$BATS_FILE_TMPDIR/before")" "greedy output of $3"
}

@test "a preheated compressed checkpoint restores from memory after the page cache is dropped: its decoded pages locked, no decode" {
	local layer bytes n
	layer=$(layer_of "$PAGES")
	preheat "[\"$PAGES\"]"
	logged "checkpoint preheat: keeping 1 checkpoint image(s) resident, within 25%"
	# The compressed pages first, then the decoded copy the preheat asked for.
	wait_for "the preheat to hold the decoded pages of $PAGES" 60 in_state "$PAGES" resident "decoded pages"
	logged "checkpoint preheat: checkpoint image $PAGES is resident: .* of the cache entry's decoded pages images"
	bytes=$(preheat_state "$PAGES" | jq -r .bytes)
	[ "$bytes" -gt $((32 << 20)) ] || die "the preheat holds $bytes bytes of $PAGES, under its 32 MiB of engine state"
	[ "$(locked_kib)" -ge $((bytes >> 10)) ] || die "containerd has $(locked_kib) KiB locked, under the $((bytes >> 10)) KiB it holds"

	sync
	echo 3 >/proc/sys/vm/drop_caches
	n=$(decodes)
	restored warm "$PAGES" "a restore from the preheated pages"
	logged "restoring from the decoded pages images of checkpoint layer $layer (100% in the page cache): no decode"
	is "$(decodes)" "$n" "decodes by the shim for the preheated image"
}

@test "an image over checkpoint_preheat_max_memory says what it needs and restores from disk; nothing is locked" {
	preheat "[\"$PLAIN\"]" 1MiB
	wait_for "the preheat to find $PLAIN too large" 60 in_state "$PLAIN" "too large"
	is "$(preheat_state "$PLAIN" | jq -r .reason)" "~^it needs [0-9.]+MiB, more than the 1MiB left of checkpoint_preheat_max_memory .*: it restores from disk$" "the reason"
	logged "checkpoint preheat: checkpoint image $PLAIN is not preheated (too large): it needs"
	is "$(locked_kib)" 0 "KiB containerd has locked"
	restored cold "$PLAIN" "a restore of an image too large to preheat"
}

@test "a preheated image that is removed is let go: its memory unlocked, its hold removed; an image not in the store says so" {
	local copy=rekindle.local/preheat:copy
	run_nerdctl tag "$PLAIN" "$copy"
	preheat "[\"$copy\", \"rekindle.local/preheat:none\"]"
	wait_for "the preheat to hold $copy" 60 in_state "$copy" resident
	[ "$(locked_kib)" -gt 0 ] || die "containerd has nothing locked for the preheated $copy"
	in_state rekindle.local/preheat:none missing || die "the preheat's record of an image not in the store: $(preheat_state rekindle.local/preheat:none)"
	"$BIN/ctr" -a "$CONTAINERD_ADDRESS" -n default snapshots ls | grep -q '^checkpoint-restore/preheat-' ||
		die "no hold of the preheat on the cache entry"

	run_nerdctl rmi "$copy"
	wait_for "the preheat to let $copy go" 30 in_state "$copy" missing
	is "$(locked_kib)" 0 "KiB containerd has locked once the image went"
	is "$("$BIN/ctr" -a "$CONTAINERD_ADDRESS" -n default snapshots ls | grep -c '^checkpoint-restore/preheat-' || true)" 0 "the preheat's holds"
}
