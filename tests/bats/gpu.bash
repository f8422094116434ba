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
