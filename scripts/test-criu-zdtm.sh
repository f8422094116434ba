#!/usr/bin/env bash
# test-criu-zdtm.sh SRCDIR: run CRIU's own memory tests (zdtm) against the
# patched CRIU built in SRCDIR, several times: as the restore runs by default,
# with CRIU_FAULT=139, which sends every task, shared mapping and premapped
# or copy-on-write region, however small, through the parallel fills of
# criu-patches/restore-fill-private-memory-with-parallel-threads, criu-patches/shmem-fill-shared-memory-content-in-parallel and criu-patches/mem-fill-premapped-private-memory-and-compare-copy-o (zdtm's images are far below their
# 64 MiB threshold otherwise); the COW tests again with pre-dumps (images
# with a parent), where the kernel tracks dirty memory, and with lazy pages,
# still under CRIU_FAULT=139. A last run, with CRIU_FAULT=140, has the private fill's helpers wake the restorer
# 100 ms before they exit, on tasks with several threads: criu reads their
# thread set, and a helper still in /proc/PID/task fails the restore (BUG
# in parse_threads) unless the restorer waits until it is gone. And the
# memory tests again with CRIU_FAULT=141: every parallel fill, as small as
# under 139, reads its pages image with O_DIRECT (criu-patches/mem-read-pages-images-with-O_DIRECT-for-the-parallel), which
# restore.log must say for private, shared and premapped memory alike,
# while compared memory still goes through the page cache. Then trees of
# several tasks with CRIU_FAULT=142 (the root task restores all of itself
# before the others start on their memory) and with zdtm's --fault 7 (a
# child dies right after it has restored its files: the restore fails, not
# hangs). Then inherit fds (criu-patches/files-refuse-criu-s-own-descriptors-as-inherit-fds-m):
# CRIU's RPC test inherit_fd.py, and zdtm's inhfd tests through the command
# line and through RPC.
#
# zdtm runs most tests as an unprivileged user, and criu then needs
# CAP_SYS_RESOURCE to read their rlimits (prlimit of another user's
# process). Where root lacks it (the dev and CI VMs), only the tests zdtm
# runs as root ("suid") can pass; the others are listed as skipped, saying why.
set -euo pipefail
. "$(dirname "$0")/lib.sh"
need_root
[ $# -eq 1 ] || die "usage: $0 CRIU_SRCDIR"
src=$(realpath -e "$1")
[ -x "$src/criu/criu" ] || die "$src/criu/criu is not built: run 'make build'"

# zdtm refuses to start on a tainted kernel: it means to catch the kernel
# warnings a test causes. A taint from before this run (another workload on
# a shared host: the dev VM runs containerd tests beside it) is noted and
# ignored (ZDTM_IGNORE_TAINT), and the run fails if the taint changes.
taint0=$(cat /proc/sys/kernel/tainted)
if [ "$taint0" != 0 ]; then
	note "zdtm: the kernel was tainted ($taint0) before this run, by: $(dmesg 2>/dev/null |
		grep -m1 -E '(WARNING|BUG):' | sed 's/^\[[^]]*\] //' || echo 'dmesg does not say')"
	export ZDTM_IGNORE_TAINT=1
fi
taint_check() {
	local t
	t=$(cat /proc/sys/kernel/tainted)
	[ "$t" = "$taint0" ] || die "zdtm: the kernel's taint went from $taint0 to $t during the run (dmesg says why)"
}

# Private anonymous memory, COW after fork, shared anonymous and memfd
# mappings, protections, THP flags, many and big mappings.
all="maps00 maps01 maps02 maps04 maps05 maps06 maps10 cow00 cow01 shm shm-unaligned shm-mp
memfd00 memfd01 memfd03 shmemfd shmemfd-priv mem-touch mprotect00 thp_disable"
as_root="maps01 cow00 cow01 shmemfd shmemfd-priv"
# Tasks with several threads, for the CRIU_FAULT=140 run (the fill runs
# where criu creates the pid namespace: zdtm's ns flavour).
threads_all="seccomp_filter_threads pthread00 pthread01"
threads_as_root="seccomp_filter_threads"
# Trees of several tasks (children, zombies, helpers, read-only mounts), for
# the CRIU_FAULT=142 and 7 runs of
# criu-patches/restore-let-the-root-task-restore-its-memory-beside.
tree_all="pid00 zombie00 zombie01 cow00 file_shared child_opened_proc session00 helper_zombie_child
mntns_ro_root mnt_ro_bind fifo_upon_unix_socket00"
tree_as_root="zombie01 cow00 mntns_ro_root mnt_ro_bind fifo_upon_unix_socket00"

# CAP_SYS_RESOURCE is bit 24 of CapEff.
capeff=$(awk '/^CapEff:/ {print $2}' /proc/self/status)
if (((0x$capeff >> 24) & 1)); then
	tests=$all
	threads=$threads_all
	tree=$tree_all
else
	tests=$as_root
	threads=$threads_as_root
	tree=$tree_as_root
	note "zdtm: root lacks CAP_SYS_RESOURCE here; skipped (they run as another user):" \
		"$(comm -23 <(tr ' ' '\n' <<<"$all" | sort) <(tr ' ' '\n' <<<"$as_root" | sort) | tr '\n' ' ')"
fi

note "zdtm: building its library, pycriu and the tests"
log=$src/test/zdtm-build.log
{
	make -C "$src" lib &&
		make -C "$src/test/zdtm/lib" &&
		make -C "$src/test/zdtm/static" $tests $threads $tree
} >"$log" 2>&1 || { tail -20 "$log" >&2; die "building zdtm failed; full log: $log"; }

args=()
for t in $tests; do args+=(-t "zdtm/static/$t"); done
# zdtm and the pycriu it imports need Debian's Python (yaml, protobuf).
# Under a time limit: a restore that a bug hangs must fail the run.
run_zdtm() {
	(cd "$src/test" && env PATH=/usr/sbin:/usr/bin:/sbin:/bin "$@" timeout 900 /usr/bin/python3 zdtm.py run \
		"${args[@]}" -f h,ns --keep-going) || die "zdtm: a test failed, or the run hung for 900 s"
}
note "zdtm: ${tests//$'\n'/ } (default restore)"
run_zdtm
note "zdtm: the same with CRIU_FAULT=139 (every task through the parallel fill)"
rm -rf "$src/test/dump"
args+=(--keep-img always)
run_zdtm CRIU_FAULT=139
# Prove the helpers ran: the restorer logs each parallel fill.
logs=$(cat "$src"/test/dump/zdtm/static/*/*/*/restore.log 2>/dev/null)
fills=$(grep -c 'Filling .* private memory .* with [2-9][0-9]* threads' <<<"$logs" || true)
shared=$(grep -c 'Filling .* shared memory .* with [2-9][0-9]* processes' <<<"$logs" || true)
cow=$(grep -c 'Filling .* premapped private memory, [1-9][0-9]* pages of it compared .* with [2-9][0-9]* processes' <<<"$logs" || true)
[ "$fills" -gt 0 ] || die "zdtm: no restore filled private memory with helper threads (no 'Filling ... threads' in restore.log)"
[ "$shared" -gt 0 ] || die "zdtm: no restore filled shared memory with helper processes (no 'Filling ... processes' in restore.log)"
[ "$cow" -gt 0 ] || die "zdtm: no restore compared copy-on-write memory with helper processes (no 'Filling ... premapped ... compared' in restore.log)"
# criu-patches/restore-read-the-files-of-mappings-ahead-while-the-t, in the ns flavour's restores.
warm=$(grep -c 'warm: Read ahead [1-9][0-9]* of [0-9]* mapped files' <<<"$logs" || true)
[ "$warm" -gt 0 ] || die "zdtm: no restore read its mapped files ahead (no 'warm: Read ahead N of ... mapped files' in restore.log)"
note "zdtm: helpers filled private memory in $fills restored tasks, shared memory in $shared mappings" \
	"and compared copy-on-write memory in $cow tasks; $warm restores read their mapped files ahead"

# Images with a parent (pre-dump) need the kernel's dirty memory tracking
# (soft-dirty), which the dev VM's kernel lacks; lazy pages need userfaultfd.
cow_tests="cow00 cow01 maps01"
if "$src/criu/criu" check --feature mem_dirty_track >/dev/null 2>&1; then
	note "zdtm: $cow_tests with two pre-dumps (images with a parent), CRIU_FAULT=139"
	rm -rf "$src/test/dump"
	args=(--keep-img always --pre 2)
	for t in $cow_tests; do args+=(-t "zdtm/static/$t"); done
	(cd "$src/test" && env PATH=/usr/sbin:/usr/bin:/sbin:/bin CRIU_FAULT=139 /usr/bin/python3 zdtm.py run \
		"${args[@]}" -f ns --keep-going)
	logs=$(cat "$src"/test/dump/zdtm/static/*/*/*/restore.log 2>/dev/null)
	grep -q 'Filling .* premapped private memory.* with [2-9][0-9]* processes' <<<"$logs" ||
		die "zdtm: no restore from pre-dumped images filled premapped memory with helper processes"
else
	note "zdtm: no pre-dump run: this kernel has no dirty memory tracking (criu check --feature mem_dirty_track)"
fi
note "zdtm: $cow_tests with lazy pages, CRIU_FAULT=139 (zdtm skips the tests marked nolazy: cow00, cow01)"
args=(--lazy-pages)
for t in $cow_tests; do args+=(-t "zdtm/static/$t"); done
(cd "$src/test" && env PATH=/usr/sbin:/usr/bin:/sbin:/bin CRIU_FAULT=139 /usr/bin/python3 zdtm.py run \
	"${args[@]}" -f ns --keep-going)

note "zdtm: $threads with CRIU_FAULT=140 (helpers wake the restorer 100 ms before they exit)"
rm -rf "$src/test/dump"
args=(--keep-img always)
for t in $threads; do args+=(-t "zdtm/static/$t"); done
(cd "$src/test" && env PATH=/usr/sbin:/usr/bin:/sbin:/bin CRIU_FAULT=140 /usr/bin/python3 zdtm.py run "${args[@]}" \
	-f ns --keep-going)
logs=$(cat "$src"/test/dump/zdtm/static/*/*/*/restore.log 2>/dev/null)
late=$(grep -c 'Filling .* private memory .* with [2-9][0-9]* threads' <<<"$logs" || true)
[ "$late" -gt 0 ] || die "zdtm: CRIU_FAULT=140 started no helper threads (no 'Filling ... threads' in restore.log)"
note "zdtm: $late restored tasks outwaited helpers that left late"

note "zdtm: ${tests//$'\n'/ } with CRIU_FAULT=141 (every parallel fill reads with O_DIRECT)"
rm -rf "$src/test/dump"
args=(--keep-img always)
for t in $tests; do args+=(-t "zdtm/static/$t"); done
run_zdtm CRIU_FAULT=141
logs=$(cat "$src"/test/dump/zdtm/static/*/*/*/restore.log 2>/dev/null)
direct=$(grep -c 'Filling .* private memory .* with [2-9][0-9]* threads, reading pages-[0-9]*.img with O_DIRECT' <<<"$logs" || true)
dshared=$(grep -c 'Filling .* shared memory .* with [2-9][0-9]* processes, reading pages-[0-9]*.img with O_DIRECT' <<<"$logs" || true)
dpremap=$(grep -c 'Filling .* premapped private memory, .* with [2-9][0-9]* processes, reading pages-[0-9]*.img with O_DIRECT' <<<"$logs" || true)
# Compare chunks are read aside, through the page cache even then (criu-patches/mem-read-pages-images-with-O_DIRECT-for-the-parallel).
dcow=$(grep -c 'Filling .* premapped private memory, [1-9][0-9]* pages of it compared .* with [2-9][0-9]* processes.*, comparing pages-[0-9]*.img through the page cache' <<<"$logs" || true)
[ "$direct" -gt 0 ] || die "zdtm: CRIU_FAULT=141 filled no private memory with O_DIRECT (no 'Filling ... with O_DIRECT' in restore.log)"
[ "$dshared" -gt 0 ] || die "zdtm: CRIU_FAULT=141 filled no shared memory with O_DIRECT"
[ "$dpremap" -gt 0 ] || die "zdtm: CRIU_FAULT=141 filled no premapped memory with O_DIRECT"
[ "$dcow" -gt 0 ] || die "zdtm: CRIU_FAULT=141 compared no copy-on-write memory in helpers (no ', comparing pages-N.img through the page cache')"
! grep -q 'O_DIRECT reads of .* failed' <<<"$logs" ||
	die "zdtm: an O_DIRECT read failed and fell back: $(grep -m1 'O_DIRECT reads of' <<<"$logs")"
note "zdtm: O_DIRECT filled private memory in $direct tasks, shared memory in $dshared mappings, premapped memory in $dpremap tasks; helpers compared memory in $dcow tasks"

# The root task waits only for the others' files, not their memory
# (criu-patches/restore-let-the-root-task-restore-its-memory-beside):
# CRIU_FAULT=142 holds every other task 500 ms after it reports its files,
# so the root restores all of itself while they have not started; the
# root's log line says how many were still restoring when it went on.
note "zdtm: ${tree//$'\n'/ } with CRIU_FAULT=142 (the root task restores itself before the others)"
rm -rf "$src/test/dump"
args=(--keep-img always)
for t in $tree; do args+=(-t "zdtm/static/$t"); done
run_zdtm CRIU_FAULT=142
logs=$(cat "$src"/test/dump/zdtm/static/*/*/*/restore.log 2>/dev/null)
ahead=$(grep -c 'Other tasks restored their files; [1-9][0-9]* threads, helpers and zombies of theirs still restoring' <<<"$logs" || true)
[ "$ahead" -gt 0 ] || die "zdtm: under CRIU_FAULT=142 no root task went on while other tasks were still restoring"
note "zdtm: in $ahead restores the root task went on while other tasks were still restoring"

# A task that dies right after it reports its files (CRIU_FAULT=7), when
# the root task may be in its restorer already, must fail the restore, not
# hang it; zdtm then restores again without the fault. timeout catches a
# hang.
note "zdtm: cow00 with CRIU_FAULT=7 (a child dies right after it reports its files)"
rm -rf "$src/test/dump"
args=(--keep-img always --fault 7 -t zdtm/static/cow00)
run_zdtm
failed=$(cat "$src"/test/dump/zdtm/static/*/*/*/restore.log.fail 2>/dev/null)
died=$(grep -c 'fault: Restore of a child task failure!' <<<"$failed" || true)
[ "$died" -gt 0 ] || die "zdtm: CRIU_FAULT=7 failed no restore (no restore.log.fail naming the fault)"
note "zdtm: $died restores failed when a child died after its files, and passed without the fault"

# criu-patches/files-refuse-criu-s-own-descriptors-as-inherit-fds-m: an
# swrk restore given criu's own RPC socket as an inherit fd fails before
# any task is created; a regular file the images name "/pipe:[N]" does not
# take the descriptor given for pipe:[N]; a pipe given at criu's fd 0, as
# runc gives stdio, becomes the restored task's stdin (test/others/rpc).
# zdtm's inhfd tests restore pipes, a socket, ttys, a FIFO (an external
# file) and memfds from descriptors given for them, by the command line
# and by RPC.
note "rpc: inherit_fd.py (criu's own descriptors refused, keys matched by the kind of file)"
make -C "$src/test/others/rpc" rpc_pb2.py criu >>"$log" 2>&1 ||
	{ tail -20 "$log" >&2; die "building CRIU's RPC tests failed; full log: $log"; }
(cd "$src/test/others/rpc" && mkdir -p build &&
	env PATH=/usr/sbin:/usr/bin:/sbin:/bin timeout 300 /usr/bin/python3 ./inherit_fd.py build) ||
	die "rpc: inherit_fd.py failed"
args=()
for t in pipe socket tty fifo memfd; do args+=(-t "inhfd/$t.py"); done
note "zdtm: inhfd/{pipe,socket,tty,fifo,memfd}, by the command line and by RPC"
for how in "" --rpc; do
	(cd "$src/test" && env PATH=/usr/sbin:/usr/bin:/sbin:/bin timeout 900 /usr/bin/python3 zdtm.py run ${how:+"$how"} \
		"${args[@]}" -f h --keep-going) || die "zdtm: an inhfd test failed${how:+ with $how}, or the run hung for 900 s"
done

# criu-patches/cuda-restore-the-CUDA-state-of-a-tree-s-processes-at: with
# the CUDA plugin forced on (CRIU_FAULT=138: no GPU here) and zdtm's mocked
# cuda-checkpoint, whose restores take 1 s, the tasks of cow00's tree (three
# in the ns flavour) restore their CUDA state at once, then unlock; a
# restore that fails is logged as an error naming the task, and fails the
# restore once no step is in flight: CRIU kills the tree (see the patches).
note "zdtm: cow00 with the CUDA plugin and a mocked cuda-checkpoint (CRIU_FAULT=138)"
rm -rf "$src/test/dump"
mock=$(mktemp)
args=(--keep-img always --mocked-cuda-checkpoint -t zdtm/static/cow00)
(cd "$src/test" && env PATH=/usr/sbin:/usr/bin:/sbin:/bin CRIU_FAULT=138 MOCK_CUDA_CHECKPOINT_LOG="$mock" \
	MOCK_CUDA_CHECKPOINT_DELAY_MS=1000 timeout 900 /usr/bin/python3 zdtm.py run "${args[@]}" -f ns) ||
	die "zdtm: cow00 with the mocked cuda-checkpoint failed"
# Lines: ACTION PID START END (ns). Every restore starts before any ends;
# every unlock starts after the last restore ended.
read -r n overlap ordered < <(awk '$1 == "restore" { n++; if (!s || $3 > s) s = $3; if (!e || $4 < e) e = $4; if ($4 > last) last = $4 }
	$1 == "unlock" { u[NR] = $3; nu++ }
	END { ok = (nu == n); for (i in u) if (u[i] < last) ok = 0; print n + 0, (s < e), ok }' "$mock")
[ "$n" -ge 2 ] || die "zdtm: the mocked cuda-checkpoint restored $n task(s) of cow00's tree, want 2 or more: $(cat "$mock")"
[ "$overlap" = 1 ] || die "zdtm: the CUDA restores of cow00's tasks ran one after another: $(grep ^restore "$mock")"
[ "$ordered" = 1 ] || die "zdtm: not every task was unlocked once, after every restore had ended: $(cat "$mock")"
note "zdtm: $n tasks restored their CUDA state at once, then unlocked"
rm -rf "$src/test/dump"
: >"$mock"
args=(--keep-img always --mocked-cuda-checkpoint -t zdtm/static/cow00)
# In the ns flavour the root task is the pid namespace's init, whose exit
# waits for the tasks CRIU traces: a kill that does not reap them hangs
# (criu-patches/restore-reap-the-seized-tasks-it-kills-in-a-new-pid-),
# and zdtm's own alarm fails the run after 60 s.
t0=$SECONDS
! (cd "$src/test" && env PATH=/usr/sbin:/usr/bin:/sbin:/bin CRIU_FAULT=138 MOCK_CUDA_CHECKPOINT_LOG="$mock" \
	MOCK_CUDA_CHECKPOINT_FAIL=restore timeout 300 /usr/bin/python3 zdtm.py run "${args[@]}" -f ns) ||
	die "zdtm: cow00 restored though every mocked CUDA restore failed"
logs=$(cat "$src"/test/dump/zdtm/static/cow00/*/*/restore.log 2>/dev/null)
grep -q 'restore of pid [0-9]* failed: .*mocked restore failure' <<<"$logs" &&
	grep -q 'Devices of the restored tasks could not all be resumed' <<<"$logs" &&
	grep -q 'Killing processes because of failure on restore' <<<"$logs" &&
	grep -q 'Restoring FAILED' <<<"$logs" ||
	die "zdtm: a failed mocked CUDA restore did not fail the restore, naming the task, in $((SECONDS - t0)) s: $(grep -m3 -e cuda_plugin -e Error <<<"$logs")"
! grep -q 'did not end' <<<"$logs" || die "zdtm: the killed tasks were not all reaped: $(grep 'did not end' <<<"$logs")"
! grep -q '^unlock ' "$mock" || die "zdtm: a task whose CUDA restore failed was unlocked: $(cat "$mock")"
! pgrep -f 'zdtm/static/cow00' >/dev/null || die "zdtm: cow00's tasks outlived the failed restore: $(pgrep -af zdtm/static/cow00)"
rm -f "$mock"
note "zdtm: a failed CUDA restore failed the restore in $((SECONDS - t0)) s, naming the task; the tree was killed and reaped"
taint_check
