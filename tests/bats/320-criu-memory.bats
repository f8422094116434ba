#!/usr/bin/env bats
# The patched CRIU (criu-patches/) restores process memory exactly: every
# page of a process with a 1 GB heap, sparse pages, many VMAs, 80 MiB each of
# memfd and shared anonymous memory and COW pages after fork, through
# containerd, with helpers filling it in parallel (restore.log says how
# many); a tree whose parent and child share half of a 512 MiB heap
# copy-on-write still shares it after the restore, the parent's heap filled
# and the child's compared by helpers; a damaged pages image
# fails the restore cleanly instead of hanging; and two processes that
# share a deleted /dev/shm file (NCCL's shared-memory transport) share one
# file again after a restore (tests/criu/shmshare.py).
#
# tests/criu/memstate builds the process and reports a digest per region;
# make test-criu runs CRIU's own zdtm memory tests.

load helpers

setup_file() {
	# A stock CRIU fails here rather than skipping: these tests are what
	# tells it from the patched one.
	"$BIN/criu" --help | grep -q -- --restore-threads ||
		die "$BIN/criu is not built with criu-patches/ (run 'make build')"
	stack_up
	load_image base
	export MEMSTATE=$BATS_FILE_TMPDIR/memstate
	gcc -O2 -static -o "$MEMSTATE" "$REKINDLE_ROOT/tests/criu/memstate.c"
}

teardown_file() {
	stack_down
}

teardown() {
	# A tree that a failed test left outside containerd: memstate runs in
	# its own process group, which the test records (host pids only).
	local g
	g=$(cat "$BATS_TEST_TMPDIR/host-pgid" 2>/dev/null || true)
	[[ $g =~ ^[0-9]+$ ]] && [ "$g" -gt 1 ] && kill -KILL -- "-$g" 2>/dev/null
	run_nerdctl '?' rm -f ms
}

# none_alive PID...: none of these processes exists, not even as a zombie.
none_alive() {
	local p
	for p in "$@"; do [ ! -d "/proc/$p" ] || return 1; done
}

# both_reports OUT SEND...: run SEND (which signals the memstate tree), wait
# for the parent's and the child's digests in OUT, print them.
both_reports() {
	local out=$1
	shift
	rm -f "$out/parent.txt" "$out/child.txt"
	"$@"
	wait_for "memstate's digests" 120 test -s "$out/parent.txt" -a -s "$out/child.txt"
	cat "$out/parent.txt" "$out/child.txt"
}

# threads PID: the thread count of PID and of each of its children.
threads() {
	local p
	for p in $1 $(cat "/proc/$1/task/$1/children"); do
		ls "/proc/$p/task" | wc -l
	done
}

@test "a container's memory restored through containerd matches page by page" {
	local d=$BATS_TEST_TMPDIR/ms
	mkdir -p "$d/out"
	cp "$MEMSTATE" "$d/"
	# 80 MiB each of memfd and shared anonymous memory: above the 64 MiB
	# under which CRIU fills a mapping serially.
	run_nerdctl run -d --name ms -v "$d:/ms" "$BASE_IMAGE" /ms/memstate 1100 /ms/out 80
	wait_for "memstate to fill its memory" 120 test -s "$d/out/ready"
	local before after pid threads0
	before=$(both_reports "$d/out" "$REKINDLE_ROOT/scripts/nerdctl.sh" "$RK_DIR" kill -s USR1 ms)
	[[ $before == *"heap "*"shared_kb"* ]] || die "memstate reported nothing: '$before'"
	pid=$("$REKINDLE_ROOT/scripts/nerdctl.sh" "$RK_DIR" inspect -f '{{.State.Pid}}' ms)
	threads0=$(threads "$pid")

	run_nerdctl checkpoint create ms ck1
	run_nerdctl start --checkpoint ck1 ms

	after=$(both_reports "$d/out" "$REKINDLE_ROOT/scripts/nerdctl.sh" "$RK_DIR" kill -s USR1 ms)
	is "$after" "$before" "every region's digest, resident pages and COW-shared pages after the restore"
	pid=$("$REKINDLE_ROOT/scripts/nerdctl.sh" "$RK_DIR" inspect -f '{{.State.Pid}}' ms)
	is "$(threads "$pid")" "$threads0" "thread counts of parent and child: the fill's helper threads are gone"

	# The pages came through the parallel fills (criu-patches/restore-fill-private-memory-with-parallel-threads, criu-patches/shmem-fill-shared-memory-content-in-parallel),
	# not the serial loop: CRIU's restore.log, in the task's work directory
	# while the task runs, says how many threads and processes filled them.
	# A stock CRIU, or one whose helpers never start, logs neither line.
	local id log
	id=$("$REKINDLE_ROOT/scripts/nerdctl.sh" "$RK_DIR" inspect -f '{{.ID}}' ms)
	log=$(find "$RK_DIR" -path "*/$id/*" -name restore.log | head -1)
	[ -n "$log" ] || die "no restore.log of container $id under $RK_DIR"
	grep -Eq 'Filling [0-9]+ MiB of private memory in [0-9]+ chunks with ([2-9]|[1-9][0-9]+) threads' "$log" ||
		die "no task's private memory was filled by helper threads: $(grep -h Filling "$log" || echo "no 'Filling' in $log")"
	grep -Eq 'Filling [0-9]+ MiB of shared memory in [0-9]+ chunks with ([2-9]|[1-9][0-9]+) processes' "$log" ||
		die "no shared mapping was filled by helper processes: $(grep -h Filling "$log" || echo "no 'Filling' in $log")"
}

# tree_tasks PID: the processes and threads in PID's pid namespace (the
# container's), as "N processes, M threads".
tree_tasks() {
	local ns p np=0 nt=0 n
	ns=$(readlink "/proc/$1/ns/pid")
	for p in /proc/[0-9]*; do
		[ "$(readlink "$p/ns/pid" 2>/dev/null)" = "$ns" ] || continue
		n=$(ls "$p/task" 2>/dev/null | wc -l)
		[ "$n" -gt 0 ] || continue
		np=$((np + 1)) nt=$((nt + n))
	done
	echo "$np processes, $nt threads"
}

@test "a copy-on-write tree restored through containerd keeps its shared pages shared" {
	local d=$BATS_TEST_TMPDIR/ms
	mkdir -p "$d/out"
	cp "$MEMSTATE" "$d/"
	# A 512 MiB heap written before the fork, of which the child rewrote
	# every other page: 256 MiB stays shared copy-on-write between the two.
	# CRIU premaps it in the parent, the child inherits it, and only the
	# child's own pages may be copied.
	run_nerdctl run -d --name ms -v "$d:/ms" "$BASE_IMAGE" /ms/memstate -c 512 16 /ms/out 8
	wait_for "memstate to fill its memory" 120 test -s "$d/out/ready"
	local before after pid tasks0 kb
	before=$(both_reports "$d/out" "$REKINDLE_ROOT/scripts/nerdctl.sh" "$RK_DIR" kill -s USR1 ms)
	pid=$("$REKINDLE_ROOT/scripts/nerdctl.sh" "$RK_DIR" inspect -f '{{.State.Pid}}' ms)
	tasks0=$(tree_tasks "$pid")
	is "$tasks0" "2 processes, 2 threads" "memstate's parent and child, one thread each"
	# Both see the unwritten half shared (Shared_Clean + Shared_Dirty in
	# smaps): at least 90% of 256 MiB, in KiB.
	for kb in $(grep -o 'shared_kb [0-9]*' <<<"$before" | cut -d' ' -f2); do
		[ "$kb" -ge 235929 ] || die "before the checkpoint only $kb KiB of cow is shared: $before"
	done

	# A checkpoint name of its own: nerdctl refuses ck1, the first test's ("already exists").
	run_nerdctl checkpoint create ms ck-cow
	run_nerdctl start --checkpoint ck-cow ms

	after=$(both_reports "$d/out" "$REKINDLE_ROOT/scripts/nerdctl.sh" "$RK_DIR" kill -s USR1 ms)
	is "$after" "$before" "parent's and child's digests, and the KiB of cow each shares, after the restore"
	pid=$("$REKINDLE_ROOT/scripts/nerdctl.sh" "$RK_DIR" inspect -f '{{.State.Pid}}' ms)
	is "$(tree_tasks "$pid")" "$tasks0" "the container's processes and threads: no fill helper is left"

	# The parent filled the heap and the child compared it through helper
	# processes (criu-patches/mem-fill-premapped-private-memory-and-compare-copy-o), not the serial loop.
	local id log
	id=$("$REKINDLE_ROOT/scripts/nerdctl.sh" "$RK_DIR" inspect -f '{{.ID}}' ms)
	log=$(find "$RK_DIR" -path "*/$id/*" -name restore.log | head -1)
	[ -n "$log" ] || die "no restore.log of container $id under $RK_DIR"
	grep -Eq 'Filling [0-9]+ MiB of premapped private memory, 0 pages of it compared .* with ([2-9]|[1-9][0-9]+) processes' "$log" ||
		die "the parent's premapped heap was not filled by helpers: $(grep -h Filling "$log" || echo "no 'Filling' in $log")"
	grep -Eq 'Filling [0-9]+ MiB of premapped private memory, [1-9][0-9]* pages of it compared .* with ([2-9]|[1-9][0-9]+) processes' "$log" ||
		die "the child's copy-on-write heap was not compared by helpers: $(grep -h Filling "$log" || echo "no 'Filling' in $log")"
}

# dump_memstate IMG [-c COW_MB] HEAP_MB [SHARED_MB]: memstate outside
# containerd, in a process group of its own (recorded for teardown), dumped
# by criu into IMG; returns once the dumped tree has exited, its host pids
# in tree.
dump_memstate() {
	local img=$1 d=$BATS_TEST_TMPDIR/ms opts=()
	shift
	[ "$1" != -c ] || { opts=(-c "$2"); shift 2; }
	mkdir -p "$d/out" "$img"
	setsid "$MEMSTATE" "${opts[@]}" "$1" "$d/out" "${@:2}" </dev/null >"$d/log" 2>&1 &
	wait_for "memstate to fill its memory" 60 test -s "$d/out/ready"
	cat "$d/out/ready" >"$BATS_TEST_TMPDIR/host-pgid"
	tree=$(ps -o pid= -g "$(cat "$d/out/ready")")
	run_cmd "$BIN/criu" dump -t "$(cat "$d/out/ready")" -D "$img" -o dump.log
	wait_for "the dumped tree to exit" 30 none_alive $tree
}

@test "a truncated pages image fails the restore, naming the image, with no process left" {
	local img=$BATS_TEST_TMPDIR/img tree
	dump_memstate "$img" 200

	# Cut the end off the largest pages image: the parent's heap.
	local pages
	pages=$(ls -S "$img"/pages-*.img | head -1)
	truncate -s -1M "$pages"

	# Serial (criu-patches/restorer-fail-on-a-truncated-pages-image-instead-of) and parallel (criu-patches/restore-fill-private-memory-with-parallel-threads) fill alike, the latter through the
	# page cache and with O_DIRECT (criu-patches/mem-read-pages-images-with-O_DIRECT-for-the-parallel), last with the image also cut short
	# of a page boundary (the O_DIRECT read there returns a part of a block,
	# the rest goes through the cache); stock CRIU spins forever here.
	local n
	for n in 1 2 2d 2o; do
		local direct=()
		[[ $n = 2[do] ]] && direct=(--restore-direct-io always -v3)
		[ "$n" != 2o ] || truncate -s -1000 "$pages"
		run_cmd '?' timeout 120 "$BIN/criu" restore -d -D "$img" -o "restore-$n.log" --restore-threads "${n:0:1}" "${direct[@]}"
		[ "$status" -ne 0 ] || die "restore of a truncated image succeeded"
		[ "$status" -ne 124 ] || die "restore of a truncated image hung (timeout)"
		run grep -o "$(basename "$pages") is shorter than its pagemap" "$img/restore-$n.log"
		[ "$status" -eq 0 ] || die "restore.log does not name $(basename "$pages"): $(grep Error "$img/restore-$n.log")"
		[ ${#direct[@]} -eq 0 ] || grep -q "reading $(basename "$pages") with O_DIRECT" "$img/restore-$n.log" ||
			die "the --restore-direct-io always restore did not read $(basename "$pages") with O_DIRECT"
		# criu kills what it restored, and may return while the SIGKILL is
		# still landing: give the tree a few seconds to be dead (zombies
		# count; init reaps them).
		wait_for "no process of the failed restore left running" 10 gone $tree
		# The next restore needs the pids back: wait for init to reap them.
		wait_for "the failed restore's zombies to be reaped" 60 none_alive $tree
	done
}

@test "a truncated copy-on-write pages image fails the restore, naming the image, with no process left" {
	local img=$BATS_TEST_TMPDIR/img tree
	# 256 MiB shared copy-on-write: the parent fills it premapped, the child
	# compares it (criu-patches/mem-fill-premapped-private-memory-and-compare-copy-o), both through helpers.
	dump_memstate "$img" -c 256 8
	# The two largest pages images: the parent's and the child's.
	# Each through the page cache and with O_DIRECT (criu-patches/mem-read-pages-images-with-O_DIRECT-for-the-parallel), the
	# latter also cut short of a page boundary (an O_DIRECT read that ends
	# there returns a part of a block, and the rest goes through the cache).
	# The parent's premapped pages are read with O_DIRECT then, the child's
	# compared ones through the page cache still.
	local pages n=0 cut read=0 compared=0
	for pages in $(ls -S "$img"/pages-*.img | head -2); do
	for cut in 1M direct:1M direct:1000; do
		n=$((n + 1))
		local direct=()
		[[ $cut = direct:* ]] && direct=(--restore-direct-io always -v3)
		cp "$pages" "$pages.orig"
		truncate -s "-${cut#direct:}" "$pages"
		run_cmd '?' timeout 120 "$BIN/criu" restore -d -D "$img" -o "restore-$n.log" --restore-threads 2 "${direct[@]}"
		mv "$pages.orig" "$pages"
		[ "$status" -ne 0 ] || die "restore with a truncated $(basename "$pages") succeeded"
		[ "$status" -ne 124 ] || die "restore with a truncated $(basename "$pages") hung (timeout)"
		grep -q "$(basename "$pages") is shorter than its pagemap" "$img/restore-$n.log" ||
			die "restore.log does not name $(basename "$pages"): $(grep Error "$img/restore-$n.log")"
		if [ ${#direct[@]} -gt 0 ]; then
			if grep -q "premapped private memory, 0 pages .*reading $(basename "$pages") with O_DIRECT" "$img/restore-$n.log"; then
				read=$((read + 1))
			elif grep -q "pages of it compared .*, comparing $(basename "$pages") through the page cache" "$img/restore-$n.log"; then
				compared=$((compared + 1))
			else
				die "the --restore-direct-io always restore neither read $(basename "$pages") with O_DIRECT nor compared it through the page cache: $(grep 'Filling' "$img/restore-$n.log")"
			fi
		fi
		wait_for "no process of the failed restore left running" 10 gone $tree
		wait_for "the failed restore's zombies to be reaped" 60 none_alive $tree
	done
	done
	[ "$read" -gt 0 ] && [ "$compared" -gt 0 ] ||
		die "expected the parent's image read with O_DIRECT and the child's compared through the page cache: $read and $compared restores"
}

@test "a truncated shared memory pages image fails the restore instead of restoring zeroes" {
	local img=$BATS_TEST_TMPDIR/img tree
	# A small heap, and 32 MiB each of memfd and shared anonymous memory:
	# below the size at which CRIU fills shared memory in parallel, so its
	# serial loop (criu-patches/shmem-fail-the-restore-when-shared-memory-pages-cann) reads them.
	dump_memstate "$img" 8 32

	# The shared mappings' pages are each a pages image of exactly 32 MiB.
	local pages
	pages=$(find "$img" -name 'pages-*.img' -size 32768k | head -1)
	[ -n "$pages" ] || die "no 32 MiB pages image of shared memory in $img: $(ls -l "$img"/pages-*.img)"
	truncate -s -1M "$pages"

	run_cmd '?' timeout 120 "$BIN/criu" restore -d -D "$img" -o restore.log
	[ "$status" -ne 0 ] || die "restore of a truncated shared memory image succeeded"
	[ "$status" -ne 124 ] || die "restore of a truncated shared memory image hung (timeout)"
	grep -q "Can't read [0-9]* pages at 0x[0-9a-f]* of shmem" "$img/restore.log" ||
		die "restore.log does not say which shared memory could not be read: $(grep Error "$img/restore.log")"
	wait_for "no process of the failed restore left running" 10 gone $tree
	wait_for "the failed restore's zombies to be reaped" 60 none_alive $tree
}

@test "two processes that share a deleted /dev/shm file share one file again after the restore" {
	# NCCL's shared-memory transport between two GPU workers: one creates
	# the file, the other maps it by name, the name goes; their writes must
	# still meet after a restore, not land in two copies.
	local d=$BATS_TEST_TMPDIR/shm img=$BATS_TEST_TMPDIR/shm-img first second before
	mkdir -p "$d" "$img"
	setsid python3 "$REKINDLE_ROOT/tests/criu/shmshare.py" "$d" </dev/null >"$d/log" 2>&1 3>&- &
	echo $! >"$BATS_TEST_TMPDIR/host-pgid"
	wait_for "shmshare's two processes to map the file" 30 test -s "$d/ready"
	read -r first second <"$d/ready"
	kill -USR1 "$second"
	wait_for "the second process's write" 10 grep -qx 1 "$d/wrote"
	kill -USR2 "$first"
	wait_for "the first process's report" 10 test -s "$d/read"
	before=$(cat "$d/read")
	[[ $before == "1 "* ]] || die "before the checkpoint the first process saw '$before', not the second's write"

	# 8 MiB ghost file: over CRIU's 1 MiB default, as NCCL's are (runc.conf
	# has ghost-limit 64M on GPU hosts).
	run_cmd "$BIN/criu" dump -t "$first" -D "$img" -o dump.log --ghost-limit 64M
	wait_for "the dumped tree to exit" 30 none_alive "$first" "$second"
	is "$(find "$img" -name 'ghost-file-*.img' -size +8000k | wc -l)" 1 "one ghost file, the whole 8 MiB, for the two mappings"
	run_cmd "$BIN/criu" restore -d -D "$img" -o restore.log
	rm -f "$d/wrote" "$d/read"
	kill -USR1 "$second"
	wait_for "the restored second process's write" 10 grep -qx 2 "$d/wrote"
	kill -USR2 "$first"
	wait_for "the restored first process's report" 10 test -s "$d/read"
	is "$(cat "$d/read")" "2 ${before#1 }" "the first process sees the second's write after the restore, and the pattern written before"
	[ ! -e "/dev/shm/rekindle-shmshare-$first" ] || die "the restore left the ghost file's name in /dev/shm"
}

@test "a dumped tree with a zombie records the zombie's pid as its thread id, and restores" {
	local img=$BATS_TEST_TMPDIR/img d=$BATS_TEST_TMPDIR/ms pgid zombie tree
	mkdir -p "$d/out" "$img"
	# A child that exits before memstate takes its place: memstate never
	# reaps it, so the dumped tree holds a zombie (an engine's exited
	# helper looks the same).
	setsid sh -c '(exit 0) & exec "$0" "$@"' "$MEMSTATE" 64 "$d/out" </dev/null >"$d/log" 2>&1 &
	wait_for "memstate to fill its memory" 60 test -s "$d/out/ready"
	pgid=$(cat "$d/out/ready")
	echo "$pgid" >"$BATS_TEST_TMPDIR/host-pgid"
	zombie=$(ps -o pid=,stat= --ppid "$pgid" | awk '$2 ~ /^Z/ { print $1 }')
	[ -n "$zombie" ] || die "no zombie under memstate: $(ps -o pid=,stat=,comm= --ppid "$pgid")"
	tree=$(ps -o pid= -g "$pgid")
	run_cmd "$BIN/criu" dump -t "$pgid" -D "$img" -o dump.log
	wait_for "the dumped tree to exit" 30 none_alive $tree

	# criu-patches/dump-record-a-zombie-s-thread-id-in-pstree.img: the
	# zombie's one thread is itself, not whatever the dump's memory held.
	run_cmd "$BIN/crit" decode -i "$img/pstree.img" -o "$img/pstree.json"
	is "$(jq -c --argjson z "$zombie" '.entries[] | select(.pid == $z) | .threads' "$img/pstree.json")" "[$zombie]" \
		"the zombie's thread ids in pstree.img"
	wait_for "the dumped tree's zombie to be reaped" 60 none_alive "$zombie"
	run_cmd "$BIN/criu" restore -d -D "$img" -o restore.log
	kill -0 "$pgid" || die "memstate is not running after the restore"
	is "$(ps -o stat= -p "$zombie" | cut -c1)" "Z" "the zombie restored as a zombie"
	kill -KILL -- "-$pgid"
}
