# Helpers for the fault tests (issue 61): kill a restore's part at a phase,
# and check that the host holds nothing of the restore afterwards. Load with
# `load faults` after `load helpers`.

# container_id NAME: the ID of nerdctl's container NAME, empty if none.
container_id() {
	"$REKINDLE_ROOT/scripts/nerdctl.sh" "$RK_DIR" inspect --format '{{.ID}}' "$1" 2>/dev/null || true
}

# stack_criu: pids of the CRIU processes runc started for this file's stack
# (their parent is a runc whose command line names RK_DIR).
stack_criu() {
	local pid ppid
	for pid in $(pgrep -x criu); do
		ppid=$(awk '{print $4}' "/proc/$pid/stat" 2>/dev/null) || continue
		tr '\0' ' ' <"/proc/$ppid/cmdline" 2>/dev/null | grep -q "runc .*$RK_DIR.* restore " && echo "$pid"
	done
	return 0
}

# runc_restoring [ID]: pids of the `runc restore` processes of this stack
# (of container ID only, when given: runc's last argument).
runc_restoring() {
	local p
	for p in $(pgrep -x runc); do
		tr '\0' ' ' <"/proc/$p/cmdline" 2>/dev/null | grep -q "$RK_DIR.* restore .*${1:+ $1 $}" && echo "$p"
	done
	return 0
}

# shim_of ID: the containerd-shim-runc-v2 serving container ID.
shim_of() {
	local p
	[ -n "$1" ] || return 0
	for p in $(pgrep -x containerd-shim); do
		tr '\0' ' ' <"/proc/$p/cmdline" 2>/dev/null | grep -q -- "-id $1 .*$RK_DIR" && echo "$p"
	done
	# The name is cut to 15 characters in comm; match on the command line too.
	for p in $(pgrep -f "containerd-shim-runc-v2 .*-id $1 "); do
		tr '\0' ' ' <"/proc/$p/cmdline" 2>/dev/null | grep -q -- "$RK_DIR" && echo "$p"
	done | sort -u
	return 0
}

# restore_log_since MARK: the restore.log of a restore begun after the file
# MARK was touched, under this stack's state.
restore_log_since() {
	local log
	log=$(find "$RK_DIR" -name restore.log -newer "$1" 2>/dev/null | head -1)
	[ -n "$log" ] && echo "$log"
}

# restore_log_of_run MARK SECONDS: the restore.log of a task restored
# after MARK was touched, polled at its known path (the shim's work dir,
# where runc's --work-path points) for at most SECONDS; fails when none
# appears.
restore_log_of_run() {
	local f end=$((SECONDS + $2))
	while [ "$SECONDS" -lt "$end" ]; do
		for f in "$RK_DIR"/root/io.containerd.runtime.v2.task/default/*/restore.log; do
			[ -e "$f" ] && [ "$f" -nt "$1" ] && { echo "$f"; return 0; }
		done
	done
	return 1
}

# has_line MARK PATTERN: a restore.log begun after MARK has a line matching
# the extended regex PATTERN.
has_line() {
	local log
	log=$(restore_log_since "$1")
	[ -n "$log" ] && grep -Eq -- "$2" "$log"
}

# signal_criu_at MARK PATTERN SIGNAL: wait until the restore begun after MARK
# logs PATTERN, then send SIGNAL to its CRIU (the process runc started, not
# its forks). Prints the pid.
signal_criu_at() {
	local mark=$1 pattern=$2 sig=$3 pid log end=$((SECONDS + 60))
	wait_for "CRIU's restore.log" 60 restore_log_since "$mark" || return 1
	log=$(restore_log_since "$mark")
	pid=$(stack_criu | head -1)
	# A tight loop: a phase may last a fraction of a second.
	while [ "$SECONDS" -lt "$end" ]; do
		grep -Eq -- "$pattern" "$log" 2>/dev/null && break
	done
	if ! grep -Eq -- "$pattern" "$log" 2>/dev/null || [ -z "$pid" ] || gone "$pid"; then
		grep -niE "fill|premap|sigreturn|Forking" "$log" | cut -c1-160 | head -30 >&2
		die "no CRIU of this stack runs when its log ($log) shows '$pattern'"
		return 1
	fi
	kill "-$sig" "$pid"
	echo "$pid"
}

# what_is_left NAME PORT ID: every trace of container NAME (ID, empty when
# nerdctl does not know it) on the host, one a line; nothing when the host
# is as it was before `nerdctl run -p 127.0.0.1:PORT:...`.
what_is_left() {
	local name=$1 port=$2 id=$3 c=("$BIN/ctr" --address "$RK_DIR/containerd.sock" -n default) p
	"$REKINDLE_ROOT/scripts/nerdctl.sh" "$RK_DIR" ps -a --format '{{.Names}} {{.Status}}' 2>/dev/null |
		awk -v n="$name" '$1 == n {print "container " $0}'
	# Nothing listens on the port and no forward to it stays (CNI's portmap).
	ss -Htln "sport = :$port" | sed 's/^/listener /'
	iptables-save -t nat 2>/dev/null | grep -E -- "--dport $port( |$)" | sed 's/^/port forward /'
	for p in $(stack_criu); do echo "criu process $p"; done
	[ -n "$id" ] || return 0
	# CNI's bridge and firewall plugins: rules naming the container or its address.
	iptables-save 2>/dev/null | grep -F -- "$id" | sed 's/^/iptables rule /'
	for p in $(grep -rlF -- "$id" /var/lib/cni/networks 2>/dev/null); do
		iptables-save 2>/dev/null | grep -F -- "${p##*/}/32" | sed 's/^/iptables rule /'
	done
	"${c[@]}" containers ls -q 2>/dev/null | grep -x "$id" | sed 's/^/containerd container /'
	"${c[@]}" tasks ls 2>/dev/null | awk -v i="$id" '$1 == i {print "task " $0}'
	"$BIN/runc" --root "$RK_DIR/runc/default" list -q 2>/dev/null | grep -x "$id" | sed 's/^/runc container /'
	# Processes: the engine and the wake helper by their cgroup, the shim
	# and the logger by their command line or environment.
	for p in /proc/[0-9]*; do
		[ "${p#/proc/}" != "$$" ] || continue
		if grep -qF -- "$id" "$p/cgroup" 2>/dev/null; then
			echo "process in the container's cgroup: ${p#/proc/} $(tr '\0' ' ' <"$p/cmdline" 2>/dev/null)"
		elif { tr '\0' ' ' <"$p/cmdline"; tr '\0' '\n' <"$p/environ"; } 2>/dev/null | grep -qF -- "$id"; then
			echo "process naming the container: ${p#/proc/} $(tr '\0' ' ' <"$p/cmdline" 2>/dev/null)"
		fi
	done
	find /sys/fs/cgroup -maxdepth 5 -type d -name "*$id*" 2>/dev/null | sed 's/^/cgroup /'
	grep -F -- "$id" /proc/self/mountinfo | awk '{print "mount " $5}'
	grep -rlF -- "$id" /var/lib/cni/networks 2>/dev/null | sed 's/^/CNI address /'
	"${c[@]}" snapshots ls 2>/dev/null | awk -v i="$id" 'index($0, i) {print "snapshot " $1}'
	"${c[@]}" leases ls 2>/dev/null | awk -v i="$id" 'index($0, i) {print "lease " $1}'
	return 0
}

# assert_nothing_left NAME PORT ID: what_is_left finds nothing (waiting a
# little for processes on their way out).
assert_nothing_left() {
	local left i
	for ((i = 0; i < 25; i++)); do
		left=$(what_is_left "$@")
		[ -n "$left" ] || return 0
		sleep 0.2
	done
	is "$left" "" "what the failed restore of $1 left on the host"
}
