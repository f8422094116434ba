# What the GPU engine tests (500, 510, 520) share: their notes on the TAP
# stream, clocks, and calls into an engine's container. Loaded after
# helpers.bash; RK_DIR is the file's stack, PORT the engine's port.

# say TEXT: a note under the test's line on the TAP stream.
say() {
	echo "# $*" >&3
}

# secs_since T: seconds since the epoch time T ($EPOCHREALTIME), two decimals.
secs_since() {
	awk -v a="$1" -v b="$EPOCHREALTIME" 'BEGIN { printf "%.2f", b - a }'
}

# call_in NAME METHOD PATH [JSON]: one HTTP call to the engine in container
# NAME on PORT, made inside its network namespace; fails on an answer other
# than 2xx.
call_in() {
	local name=$1 method=$2 path=$3 body=${4:-} pid
	pid=$("$REKINDLE_ROOT/scripts/nerdctl.sh" "$RK_DIR" inspect -f '{{.State.Pid}}' "$name") || return 1
	if [ -n "$body" ]; then
		nsenter -t "$pid" -n curl -fsS --max-time 120 -X "$method" -H 'Content-Type: application/json' -d "$body" "http://127.0.0.1:$PORT$path"
	else
		nsenter -t "$pid" -n curl -fsS --max-time 120 -X "$method" "http://127.0.0.1:$PORT$path"
	fi
}

# wake_status NAME: the wake helper's record in container NAME
# (/.rekindle/status), once it holds an outcome.
wake_status() {
	wait_for "the wake helper in $1 to record its outcome" 300 \
		sh -c "'$REKINDLE_ROOT/scripts/nerdctl.sh' '$RK_DIR' exec '$1' cat /.rekindle/status | grep -q outcome"
	"$REKINDLE_ROOT/scripts/nerdctl.sh" "$RK_DIR" exec "$1" cat /.rekindle/status
}

# restored_line: containerd's phase times of the last restore.
restored_line() {
	grep -o 'restored from checkpoint image [^"]*' "$RK_DIR/containerd.log" | tail -1
}

# skip_if_no_cdi: the GPU tests give containers GPUs through CDI.
skip_if_no_cdi() {
	compgen -G '/etc/cdi/*.yaml' >/dev/null || compgen -G '/var/run/cdi/*.yaml' >/dev/null ||
		skip "no CDI spec for nvidia.com/gpu in /etc/cdi (tests/gpu/run.sh makes one)"
}

# engine_stack_up IMAGE: once per file, the stack (RK_DIR) and the image
# archive IMAGE.tar loaded, from the build or the GPU bundle. STACK_FRESH is
# 1 when it brought them up now, 0 when an earlier test of the file had.
# (Not for an if: a failure there would not end the test.)
engine_stack_up() {
	export RK_DIR=$BATS_FILE_TMPDIR/rk
	STACK_FRESH=0
	[ ! -f "$BATS_FILE_TMPDIR/stack-up" ] || return 0
	STACK_FRESH=1
	stack_up
	touch "$BATS_FILE_TMPDIR/stack-up"
	local tar
	for tar in "$IMAGES/$1.tar" "$BIN/../images/$1.tar"; do
		[ -f "$tar" ] && break
	done
	[ -f "$tar" ] || die "$1.tar is in neither $IMAGES nor $BIN/../images: run 'make build/images/$1.tar'"
	run_nerdctl load -i "$tar"
}

# host_pyflags: the nerdctl flags that bind the host's Python and the site
# folder SITE into a container (images/gpu-engine/host-python.sh), into
# $BATS_FILE_TMPDIR/pyflags.
host_pyflags() {
	PYTHONPATH=$SITE "$REKINDLE_ROOT/images/gpu-engine/host-python.sh" "$(command -v "$HOST_PY")" \
		>"$BATS_FILE_TMPDIR/pyflags" || die "host-python.sh failed"
}

# remove_listed [STACK...]: a GPU test's teardown: the containers it listed
# in $BATS_TEST_TMPDIR/containers (their logs appended to
# $BATS_FILE_TMPDIR/NAME.log first, for a failure's reading) are removed
# from each STACK (default the file's, $BATS_FILE_TMPDIR/rk) and the images
# it listed in $BATS_TEST_TMPDIR/images from the first. Nothing when the
# file's stack never came up.
remove_listed() {
	[ -f "$BATS_FILE_TMPDIR/stack-up" ] || return 0
	local stacks=("${@:-$BATS_FILE_TMPDIR/rk}") c d
	for c in $(cat "$BATS_TEST_TMPDIR/containers" 2>/dev/null); do
		for d in "${stacks[@]}"; do
			[ -d "$d" ] || continue
			"$REKINDLE_ROOT/scripts/nerdctl.sh" "$d" logs "$c" >>"$BATS_FILE_TMPDIR/$c.log" 2>&1 || true
			"$REKINDLE_ROOT/scripts/nerdctl.sh" "$d" rm -f "$c" >/dev/null 2>&1 || true
		done
	done
	for c in $(cat "$BATS_TEST_TMPDIR/images" 2>/dev/null); do
		"$REKINDLE_ROOT/scripts/nerdctl.sh" "${stacks[0]}" rmi -f "$c" >/dev/null 2>&1 || true
	done
}
