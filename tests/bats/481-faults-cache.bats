#!/usr/bin/env bats
# Faults around the extracted-checkpoint cache (issue 61): the cache GC
# beside concurrent restores, a client killed during CRIU, a damaged blob
# or pages image. After each: no container, hold, building snapshot or
# lease left beyond what is kept on purpose, and the next restore of the
# same image answers as the checkpointed engine did.

load helpers

setup_file() {
	need_built oci-checkpoint
	stack_up
	load_image base
	load_image cpu-engine
	export CONTAINERD_ADDRESS=$RK_DIR/containerd.sock

	# One engine, checkpointed once into an archive: the images below are
	# loaded from it, so a test that damages one loads it again.
	local port text
	port=$(free_port)
	start_engine fsrc "$port" -e ENGINE_STATE_MB=256
	text=$(engine POST "$port" /generate "$PROMPT" | jq -r .text)
	answered "before the checkpoint" "$text"
	echo "$text" >"$BATS_FILE_TMPDIR/answer"
	ocicp create --quiet --output "oci-archive:$BATS_FILE_TMPDIR/inplace.tar" fsrc rekindle.local/ckpt:inplace
	run_nerdctl rm -f fsrc
	# The same checkpoint with a symlink no checkpoint needs: containerd
	# then extracts the layer into its cache (an entry of its own data),
	# not the unpacked image.
	oci_python - "$BATS_FILE_TMPDIR/inplace.tar" "$BATS_FILE_TMPDIR/extracted.tar" rekindle.local/ckpt:extracted <<-'PY'
		import io, sys, tarfile
		import oci_tar
		src, dst, name = sys.argv[1:4]
		index, a = oci_tar.read(src)
		desc = index["manifests"][0]
		man = a.get_json(desc["digest"])
		old = man["layers"][0]
		inp = tarfile.open(fileobj=io.BytesIO(a.get(old["digest"])))
		buf = io.BytesIO()
		with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as out:
		    for m in inp.getmembers():
		        out.addfile(m, inp.extractfile(m) if m.isfile() else None)
		    link = tarfile.TarInfo("stray-link")
		    link.type, link.linkname = tarfile.SYMTYPE, "/etc/hostname"
		    out.addfile(link)
		new = a.add(buf.getvalue(), old.get("mediaType"))
		cfg = a.get_json(man["config"]["digest"])
		cfg["rootfs"]["diff_ids"] = [new["digest"]]
		new["annotations"] = {}
		man["layers"][0] = new
		man["config"] = a.add_json(cfg, man["config"]["mediaType"])
		desc.update(a.add_json(man))
		desc["annotations"] = oci_tar.image_name(name)
		a.write(dst, [desc])
	PY
	local f
	for f in inplace extracted; do
		oci_python -c 'import json, sys, oci_tar
index, a = oci_tar.read(sys.argv[1])
print(a.get_json(index["manifests"][0]["digest"])["layers"][0]["digest"])' "$BATS_FILE_TMPDIR/$f.tar" >"$BATS_FILE_TMPDIR/$f.layer"
	done
}

teardown() {
	[ -n "${RK_DIR:-}" ] || return 0
	[ -z "${GC_PID:-}" ] || { kill "$GC_PID" 2>/dev/null; wait "$GC_PID" 2>/dev/null || true; }
	remove_containers
	remove_images 'rekindle.local/ckpt:*'
}

teardown_file() {
	stack_down
}

# ckpt NAME: load checkpoint image rekindle.local/ckpt:NAME from its archive.
ckpt() {
	run_nerdctl load -i "$BATS_FILE_TMPDIR/$1.tar"
	IMAGE=rekindle.local/ckpt:$1 LAYER=$(cat "$BATS_FILE_TMPDIR/$1.layer")
	BLOB=$RK_DIR/root/io.containerd.content.v1.content/blobs/sha256/${LAYER#sha256:}
	[ -f "$BLOB" ] || die "no blob $BLOB of $IMAGE"
}

# again NAME: remove the image and load it again (the fix an error names).
again() {
	run_nerdctl rmi -f "rekindle.local/ckpt:$1"
	ckpt "$1"
}

k() { "$BIN/ctr" --address "$RK_DIR/containerd.sock" -n default "$@" 2>/dev/null; }

# entry LAYER: the cache snapshots of LAYER, "KEY KIND" per line.
entry() {
	k snapshots ls | awk -v p="checkpoint-cache/$1/" 'index($1, p) == 1 {print $1, $NF}'
}

# holds: the restores' holds on cache entries.
holds() {
	k snapshots ls | awk '$1 ~ /^checkpoint-restore\/.*\/checkpoint$/ {print $1}'
}

no_holds() { [ -z "$(holds)" ]; }

# no_entry LAYER: nothing of LAYER's cache entry is left.
no_entry() { [ -z "$(entry "$1")" ]; }

# clean: what a finished test leaves: no container, no hold, nothing being
# built, no lease beyond LEASES (the count before), no container's
# snapshot.
clean() {
	run_nerdctl ps -aq
	[ -z "$output" ] || die "containers left: $output"
	# A restored container's snapshots go with its task, not at the
	# collector's next run (minutes away on this VM).
	wait_for "the snapshots of removed containers to go" 5 nothing_left ||
		die "snapshots left: $(leftovers)"
	is "$(k leases ls -q | wc -l)" "${LEASES:-0}" "leases"
}

leftovers() {
	k snapshots ls | awk '$1 ~ /building-|^checkpoint-restore\// {print $1}'
}

nothing_left() { [ -z "$(leftovers)" ]; }

# extractions: how often containerd stored an extracted copy of $LAYER.
extractions() {
	grep -c "checkpoint cache: stored extracted checkpoint of checkpoint layer $LAYER" "$RK_DIR/containerd.log" || true
}

# criu_restoring: the pid of a CRIU that a runc restore of this stack runs.
criu_restoring() {
	local runc
	for runc in $(pgrep -f "runc.* restore .*$RK_DIR" || true); do
		pgrep -n -P "$runc" -x criu && return 0
	done
	return 1
}

# restored NAME PORT: nerdctl run -d of $IMAGE answers as before.
restored() {
	run_nerdctl run -d --name "$1" -p "127.0.0.1:$2:30000" "$IMAGE"
	wait_healthy "$2"
	is "$(engine POST "$2" /generate "$PROMPT" | jq -r .text)" "$(cat "$BATS_FILE_TMPDIR/answer")" "the answer of $1"
}

gc() {
	"${CACHE_GC:-$REKINDLE_ROOT/systemd/rekindle-cache-gc.sh}" --address "$RK_DIR/containerd.sock" "$@"
}

@test "cache-gc pruning in a loop beside concurrent nerdctl runs breaks no restore, and exits 0 each time" {
	ckpt extracted
	LEASES=$(k leases ls -q | wc -l)
	local port round i failed=0
	port=$(free_port)
	restored warm "$port"
	run_nerdctl rm -f warm

	: >"$BATS_TEST_TMPDIR/gc.log"
	(
		while :; do
			rc=0
			gc --max-age 0s >>"$BATS_TEST_TMPDIR/gc.log" 2>&1 || rc=$?
			echo "gc exit $rc" >>"$BATS_TEST_TMPDIR/gc.log"
		done
	) 3>&- &
	GC_PID=$!
	for round in 1 2 3; do
		local pids=() ports=()
		# The GC takes the entry now that nothing uses it; these restores
		# set it up again beside the GC's next runs.
		wait_for "cache-gc to remove the entry" 30 no_entry "$LAYER" ||
			{ tail -20 "$BATS_TEST_TMPDIR/gc.log" >&2; false; }
		for i in 1 2 3 4; do
			ports[i]=$(free_port)
			"$REKINDLE_ROOT/scripts/nerdctl.sh" "$RK_DIR" run -d --name "gc$round-$i" \
				-p "127.0.0.1:${ports[i]}:30000" "$IMAGE" >"$BATS_TEST_TMPDIR/run$round-$i.log" 2>&1 3>&- &
			pids[i]=$!
		done
		for i in 1 2 3 4; do
			if ! wait "${pids[i]}"; then
				echo "restore gc$round-$i failed: $(cat "$BATS_TEST_TMPDIR/run$round-$i.log")" >&2
				failed=$((failed + 1))
				continue
			fi
			if ! wait_for "gc$round-$i to answer" 60 engine GET "${ports[i]}" /health ||
				[ "$(engine POST "${ports[i]}" /generate "$PROMPT" | jq -r .text)" != "$(cat "$BATS_FILE_TMPDIR/answer")" ]; then
				echo "restore gc$round-$i does not answer as before" >&2
				failed=$((failed + 1))
			fi
		done
		remove_containers
	done
	kill "$GC_PID"
	wait "$GC_PID" 2>/dev/null || true
	GC_PID=
	echo "cache-gc ran $(grep -c 'gc exit' "$BATS_TEST_TMPDIR/gc.log") times, removed the entry $(grep -c ': removed (' "$BATS_TEST_TMPDIR/gc.log") times" >&2
	! grep -q -E 'gc exit [^0]' "$BATS_TEST_TMPDIR/gc.log" ||
		die "cache-gc failed: $(grep -B6 -E 'gc exit [^0]' "$BATS_TEST_TMPDIR/gc.log" | grep -v '^cache-gc: .*: keep')"
	is "$failed" "0" "restores that failed or did not answer, of 12"

	clean
	port=$(free_port)
	restored after "$port"
	run_nerdctl rm -f after
}

@test "a nerdctl run killed during CRIU is no failed restore: the entry stays, the next restore answers" {
	ckpt extracted
	LEASES=$(k leases ls -q | wc -l)
	local port
	port=$(free_port)
	restored warm "$port"
	run_nerdctl rm -f warm
	local before extracted
	before=$(entry "$LAYER" | grep -c '/data')
	extracted=$(extractions)

	"$REKINDLE_ROOT/scripts/nerdctl.sh" "$RK_DIR" run -d --name killed -p "127.0.0.1:$(free_port):30000" "$IMAGE" \
		>"$BATS_TEST_TMPDIR/killed.log" 2>&1 3>&- &
	local wrapper=$! criu='' i
	for ((i = 0; i < 1200; i++)); do
		criu=$(criu_restoring) && break
		sleep 0.05
	done
	[ -n "$criu" ] || die "CRIU never ran"
	# nerdctl itself, the wrapper's child.
	pkill -KILL -P "$wrapper" || true
	kill -KILL "$wrapper" 2>/dev/null || true
	wait "$wrapper" 2>/dev/null || true
	if ! wait_for "containerd to end the Start" 60 grep -q "checkpoint cache: kept the entry of checkpoint layer $LAYER: the restore's caller gave up" "$RK_DIR/containerd.log"; then
		grep -E 'killed|restore|checkpoint cache' "$RK_DIR/containerd.log" | tail -20 >&2
		ps -eo pid,ppid,stat,etimes,args | grep -E "criu|runc|shim" | grep -F "$RK_DIR" >&2
		false
	fi
	! grep -q "dropped [0-9]* snapshot(s) of checkpoint layer $LAYER after a failed restore" "$RK_DIR/containerd.log" ||
		die "the entry was dropped after a cancelled client"
	is "$(entry "$LAYER" | grep -c '/data')" "$before" "the entry's data and data view"

	run_nerdctl '?' rm -f killed
	clean
	restored next "$port"
	is "$(extractions)" "$extracted" "extractions since the entry was made"
	run_nerdctl rm -f next
}

@test "a checkpoint layer kept in place whose blob is overwritten, same size, is refused before anything runs, naming the blob and the fix; its entry goes" {
	ckpt inplace
	LEASES=$(k leases ls -q | wc -l)
	local port
	port=$(free_port)
	restored warm "$port"
	run_nerdctl rm -f warm
	[ -n "$(entry "$LAYER")" ] || die "no cache entry"

	local size
	size=$(stat -c %s "$BLOB")
	dd if=/dev/urandom of="$BLOB" bs=1M seek=$((size / 2 / 1048576)) count=8 conv=notrunc status=none
	is "$(stat -c %s "$BLOB")" "$size" "the blob's size"

	run_nerdctl '?' run -d --name bad -p "127.0.0.1:$port:30000" "$IMAGE"
	[ "$status" -ne 0 ] || die "nerdctl run of a damaged checkpoint exited 0"
	is "$output" "~the local blob of checkpoint layer $LAYER \\($BLOB\\) does not match its digest.*remove the image \\(nerdctl rmi $IMAGE\\) and pull it again" "the error"
	[ -z "$(entry "$LAYER" | grep data-view)" ] || die "the damaged entry is kept: $(entry "$LAYER")"
	run_nerdctl '?' rm -f bad
	clean

	again inplace
	restored fixed "$port"
	run_nerdctl rm -f fixed
}

@test "a truncated checkpoint blob is refused naming its size and the fix, before anything runs" {
	ckpt inplace
	LEASES=$(k leases ls -q | wc -l)
	local port size
	port=$(free_port)
	restored warm "$port"
	run_nerdctl rm -f warm
	size=$(stat -c %s "$BLOB")
	truncate -s -1M "$BLOB"

	run_nerdctl '?' run -d --name short -p "127.0.0.1:$port:30000" "$IMAGE"
	[ "$status" -ne 0 ] || die "nerdctl run of a truncated checkpoint exited 0"
	is "$output" "~the local blob of checkpoint layer $LAYER \\($BLOB\\) is $((size - 1048576)) bytes where the image says $size.*nerdctl rmi $IMAGE" "the error"
	grep -q "refused checkpoint image $IMAGE, its checkpoint layer's blob is damaged" "$RK_DIR/containerd.log" ||
		die "containerd does not log the reason"
	[ -z "$(entry "$LAYER" | grep data-view)" ] || die "the damaged entry is kept: $(entry "$LAYER")"
	run_nerdctl '?' rm -f short
	clean

	again inplace
	restored fixed "$port"
	run_nerdctl rm -f fixed
}

@test "a blob damaged before its first extraction is refused at extraction; nothing of it is cached" {
	ckpt extracted
	LEASES=$(k leases ls -q | wc -l)
	local port
	port=$(free_port)
	dd if=/dev/urandom of="$BLOB" bs=1M seek=1 count=8 conv=notrunc status=none

	run_nerdctl '?' run -d --name bad -p "127.0.0.1:$port:30000" "$IMAGE"
	[ "$status" -ne 0 ] || die "nerdctl run of a damaged checkpoint exited 0"
	is "$output" "~the local blob of checkpoint layer $LAYER \\($BLOB\\) does not match its digest.*nerdctl rmi $IMAGE" "the error"
	[ -z "$(entry "$LAYER")" ] || die "cache snapshots left: $(entry "$LAYER")"
	run_nerdctl '?' rm -f bad
	clean

	again extracted
	restored fixed "$port"
	run_nerdctl rm -f fixed
}

@test "a pages image changed in place in an extracted entry is found before CRIU: the entry is extracted again and the restore answers" {
	ckpt extracted
	LEASES=$(k leases ls -q | wc -l)
	local port data f
	port=$(free_port)
	restored warm "$port"
	run_nerdctl rm -f warm
	local extracted
	extracted=$(extractions)
	data=$(k snapshots mounts /x "checkpoint-cache/$LAYER/data-view" | grep -o '/[^ ,:]*/snapshots/[0-9]*/fs' | head -1)
	f=$(ls -S "$data"/checkpoint/pages-*.img | head -1)
	dd if=/dev/urandom of="$f" bs=64K seek=1 count=16 conv=notrunc status=none

	restored again "$port"
	logged "whose pages images changed since they were extracted: extracting it again"
	is "$(extractions)" "$((extracted + 1))" "extractions"
	run_nerdctl rm -f again
	clean
}
