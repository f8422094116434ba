#!/usr/bin/env bats
# The stack itself: pinned builds, the private containerd harness, nerdctl.

load helpers

setup_file() {
	stack_up
	load_image base
}

# The zombie test's holder and containerd go also when it failed half way.
teardown() {
	if [ -f "$BATS_TEST_TMPDIR/holder.pid" ]; then
		"$REKINDLE_ROOT/scripts/containerd-down.sh" "$BATS_TEST_TMPDIR/rk3" 3>&- || true
		kill "$(cat "$BATS_TEST_TMPDIR/holder.pid")" 2>/dev/null || true
	fi
}

teardown_file() {
	stack_down
}

@test "built components report the pinned versions" {
	. <(sed -n 's/^\([A-Z_]*_VERSION\) *:= *\(.*\)$/\1=\2/p' "$REKINDLE_ROOT/versions.mk")
	run_cmd containerd --version
	is "$output" "~ ${CONTAINERD_VERSION#v}\+rekindle" "containerd version"
	run_cmd runc --version
	is "$output" "~runc version ${RUNC_VERSION#v}" "runc version"
	run_cmd criu --version
	is "$output" "~Version: $CRIU_VERSION" "criu version"
	run_cmd nerdctl --version
	is "$output" "nerdctl version ${NERDCTL_VERSION#v}" "nerdctl version"
}

@test "criu check passes on this kernel" {
	run_cmd criu check
	is "$output" "~Looks good" "criu check"
}

@test "fetch-module refuses a module whose checksum differs from the pin" {
	run_cmd 1 "$REKINDLE_ROOT/scripts/fetch-module.sh" github.com/opencontainers/runc v1.5.2 \
		h1:AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA= "$BATS_TEST_TMPDIR/runc"
	is "$output" "~checksum mismatch for github.com/opencontainers/runc@v1.5.2" "error names the module"
	[ ! -e "$BATS_TEST_TMPDIR/runc" ] || die "a source tree was left behind"
}

@test "apply-patches refuses a patch whose header does not say whether it is meant for upstream, and leaves the tree untouched" {
	local d=$BATS_TEST_TMPDIR
	mkdir -p "$d/src" "$d/patches"
	printf 'module example.com/x\n\ngo 1.22\n' >"$d/src/go.mod"
	printf 'package x\n' >"$d/src/x.go"
	cp -a "$d/src" "$d/pristine"
	# A patch in git format-patch form with no Forwarded: line.
	cat >"$d/patches/0001-x-add-a-constant.patch" <<'PATCH'
From 0000000000000000000000000000000000000000 Mon Sep 17 00:00:00 2001
From: Rekindle <rekindle@localhost>
Subject: [PATCH] x: add a constant

Signed-off-by: Rekindle <rekindle@localhost>
---
 x.go | 2 ++
 1 file changed, 2 insertions(+)

diff --git a/x.go b/x.go
--- a/x.go
+++ b/x.go
@@ -1 +1,3 @@
 package x
+
+const A = 1
PATCH
	echo 0001-x-add-a-constant.patch >"$d/patches/series"
	run_cmd 1 "$REKINDLE_ROOT/scripts/apply-patches.sh" "$d/patches" "$d/src" example.com/x
	is "$output" "~0001-x-add-a-constant.patch has no Forwarded: line in its header" "the error names the patch and the field"
	diff -r "$d/pristine" "$d/src" || die "the tree was changed"
	sed -i 's/^Signed-off-by:/Forwarded: no\nSigned-off-by:/' "$d/patches/0001-x-add-a-constant.patch"
	run_cmd "$REKINDLE_ROOT/scripts/apply-patches.sh" "$d/patches" "$d/src" example.com/x
	grep -q "const A = 1" "$d/src/x.go" || die "the patch was not applied"
}

@test "containerd-up refuses to start over a running containerd" {
	run_cmd 1 "$REKINDLE_ROOT/scripts/containerd-up.sh" "$RK_DIR"
	is "$output" "~left by an earlier run still serves $RK_DIR: stop it with 'scripts/containerd-down.sh" "names the stale daemon and the fix"
}

@test "containerd-up refuses a socket another containerd serves" {
	local other=$BATS_TEST_TMPDIR/other
	mkdir -p "$other"
	ln -s "$RK_DIR/containerd.sock" "$other/containerd.sock"
	run_cmd 1 "$REKINDLE_ROOT/scripts/containerd-up.sh" "$other"
	is "$output" "~socket $other/containerd.sock is in use" "names the socket"
}

@test "the harness needs root" {
	run_cmd 1 setpriv --reuid=65534 --regid=65534 --clear-groups \
		"$REKINDLE_ROOT/scripts/containerd-up.sh" "$BATS_TEST_TMPDIR/x"
	is "$output" "~must run as root" "says why"
}

@test "nerdctl runs a container from the offline base image" {
	run_ctr images ls -q
	is "$output" "~$BASE_IMAGE" "base image imported"
	run_nerdctl run --rm "$BASE_IMAGE" python3 -c 'print(6 * 7)'
	is "$output" "42" "python3 in the base image"
}

@test "containerd-down cleans up after a killed containerd" {
	local dir=$BATS_TEST_TMPDIR/rk2
	"$REKINDLE_ROOT/scripts/containerd-up.sh" "$dir" 3>&-
	run_cmd "$REKINDLE_ROOT/scripts/nerdctl.sh" "$dir" load -i "$IMAGES/base.tar"
	run_cmd "$REKINDLE_ROOT/scripts/nerdctl.sh" "$dir" run -d --name sleeper "$BASE_IMAGE" sleep 600
	local pid
	pid=$("$REKINDLE_ROOT/scripts/nerdctl.sh" "$dir" inspect -f '{{.State.Pid}}' sleeper)
	kill -0 "$pid" || die "container process $pid is not running"
	# As after a killed run: the daemon dies, shim and container live on.
	kill -KILL "$(cat "$dir/containerd.pid")"

	run_cmd "$REKINDLE_ROOT/scripts/containerd-down.sh" "$dir"
	! kill -0 "$pid" 2>/dev/null || die "container process $pid survived"
	run awk -v d="$dir/" 'index($5, d) == 1' /proc/self/mountinfo
	is "$output" "" "mounts left under $dir"
	. "$REKINDLE_ROOT/scripts/lib.sh"
	is "$(pids_with "$dir/")" "" "processes left that name $dir"
}

# issue 61: a killed containerd whose parent never waits stays a zombie,
# and kill -0 succeeds on one: containerd-up took it for a running daemon.
@test "containerd-up starts over a killed containerd that is still a zombie" {
	local dir=$BATS_TEST_TMPDIR/rk3 holder pid
	mkdir -p "$dir"
	# A parent that never reaps: a subreaper that started containerd-up and
	# sleeps, as a supervisor that does not wait would.
	python3 -c 'import ctypes, subprocess, sys, time
ctypes.CDLL(None).prctl(36, 1, 0, 0, 0)  # PR_SET_CHILD_SUBREAPER
subprocess.run([sys.argv[1], sys.argv[2]], check=True)
open(sys.argv[2] + "/holder.up", "w").close()
time.sleep(600)' "$REKINDLE_ROOT/scripts/containerd-up.sh" "$dir" 3>&- &
	holder=$!
	echo "$holder" >"$BATS_TEST_TMPDIR/holder.pid"
	wait_for "containerd-up under the holder" 30 test -e "$dir/holder.up"
	pid=$(cat "$dir/containerd.pid")
	kill -KILL "$pid"
	wait_for "containerd $pid to be a zombie" 10 grep -q '^State:[[:space:]]*Z' "/proc/$pid/status"

	run_cmd "$REKINDLE_ROOT/scripts/containerd-up.sh" "$dir"
	is "$output" "~containerd .* up on $dir/containerd.sock" "containerd-up started a new containerd"
	[ "$(cat "$dir/containerd.pid")" != "$pid" ] || die "the pid file still names the zombie"
	run_cmd "$REKINDLE_ROOT/scripts/containerd-down.sh" "$dir"
	kill "$holder"
	wait "$holder" 2>/dev/null || true
	rm "$BATS_TEST_TMPDIR/holder.pid"
	. "$REKINDLE_ROOT/scripts/lib.sh"
	is "$(pids_with "$dir/")" "" "processes left that name $dir"
}
