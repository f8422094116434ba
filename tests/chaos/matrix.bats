#!/usr/bin/env bats
# The fault matrix (issue 61): SIGKILL one part of a `nerdctl run -d` restore
# of a CPU-engine checkpoint at each phase, and `oci-checkpoint create` at
# each of its phases; after each case check what the host still holds and
# that the same image (or engine) answers as before. Driven by chaos.sh
# (make chaos), which picks the cases (CHAOS_RESTORE, CHAOS_CREATE) and
# prints the table; it lives outside tests/bats so that `make test` skips it.
#
# Each case appends one tab-separated line to $CHAOS_RESULTS:
#   kind  killed  phase  seen  outcome  leftovers  next  detail
# and a failing case never stops the matrix: later cases start from a host
# scrubbed as docs/operations.md says.

load ../bats/helpers
load ../bats/faults

IMAGE=rekindle.local/ckpt:chaos

setup_file() {
	need_built oci-checkpoint rekindle-wake
	stack_up
	export CONTAINERD_ADDRESS=$RK_DIR/containerd.sock
	load_image base
	load_image cpu-engine
	: "${CHAOS_RESULTS:=$BATS_FILE_TMPDIR/results.tsv}" "${CHAOS_LOGS:=$BATS_FILE_TMPDIR/logs}"
	mkdir -p "$CHAOS_LOGS"
	export CHAOS_RESULTS CHAOS_LOGS
}

teardown() {
	[ -n "${RK_DIR:-}" ] || return 0
	[ -z "${GC_PID:-}" ] || { kill "$GC_PID" 2>/dev/null; wait "$GC_PID" 2>/dev/null || true; }
	[ -z "${RUN_PID:-}" ] || kill -KILL "$RUN_PID" 2>/dev/null || true
	[ -z "${CREATE_PID:-}" ] || kill -KILL "$CREATE_PID" 2>/dev/null || true
}

teardown_file() {
	stack_down
	# What containerd-down.sh does not know (a killed shim's logger names
	# only the data root): the case that left it has said so.
	local p
	for p in /proc/[0-9]*; do
		[ "${p#/proc/}" != "$$" ] || continue
		tr '\0' ' ' <"$p/cmdline" 2>/dev/null | grep -qF -- "$RK_DIR/" && kill -KILL "${p#/proc/}" 2>/dev/null
		# A port reserver (sleep) a nerdctl run of this file started carries
		# its environment (bats itself does too: only sleeps go).
		[ "$(cat "$p/comm" 2>/dev/null)" = sleep ] && tr '\0' '\n' <"$p/environ" 2>/dev/null |
			grep -qxF "BATS_RUN_TMPDIR=$BATS_RUN_TMPDIR" && kill -KILL "${p#/proc/}" 2>/dev/null
	done
	return 0
}

n_() { "$REKINDLE_ROOT/scripts/nerdctl.sh" "$RK_DIR" "$@"; }
k_() { "$BIN/ctr" --address "$RK_DIR/containerd.sock" -n default "$@" 2>/dev/null; }

# record KIND KILLED PHASE SEEN OUTCOME LEFTOVERS NEXT DETAIL: one result
# line, also shown as it happens (fd 3).
record() {
	local IFS=$'\t'
	echo "$*" >>"$CHAOS_RESULTS"
	printf '# %-7s kill=%-10s at=%-13s %s %s\n' "$1" "$2" "$3" "leftovers=$6" "next=$7" >&3
}

# first_error FILE: the first line of an error in a command's output,
# shortened, or "exit 0" style text from the caller when none.
first_error() {
	grep -m1 -iE 'error|fatal|fail|refus|killed|timed out' "$1" 2>/dev/null |
		sed -E 's/^time="[^"]*" level=[a-z]+ msg="?//; s/"$//' | cut -c1-200
}

# ---- the restore matrix ----------------------------------------------------

# the_image: the checkpoint image every restore case uses, made once; its
# answer, digest and layer blob are what "untouched" is checked against.
the_image() {
	[ -f "$BATS_FILE_TMPDIR/text" ] && return 0
	local port
	port=$(free_port)
	# State to restore, so that the memory fill lasts long enough to hit.
	start_engine csrc "$port" -e "ENGINE_STATE_MB=${CHAOS_IMAGE_STATE_MB:-256}"
	record_engine "$port"
	echo "$E_TEXT" >"$BATS_FILE_TMPDIR/text"
	ocicp create -q csrc "$IMAGE"
	run_nerdctl rm -f csrc
	image_state >"$BATS_FILE_TMPDIR/image"
	k_ leases ls -q | sort >"$BATS_FILE_TMPDIR/leases"
}

# image_state: the image's digest, and each of its blobs checked against
# its digest (a restore must never write into them).
image_state() {
	local d blob
	k_ images ls | awk -v i="$IMAGE" '$1 == i {print $3}'
	for d in $(k_ content ls -q); do
		blob=$RK_DIR/root/io.containerd.content.v1.content/blobs/sha256/${d#sha256:}
		[ "$(sha256sum <"$blob" | cut -d' ' -f1)" = "${d#sha256:}" ] || echo "blob $d does not match its digest"
	done
}

# phase_reached PHASE: the restore begun after $MARK is at PHASE.
#   task-create   runc restore runs, no CRIU yet
#   criu-started  CRIU forks the tasks (restore.log), before the memory fill
#   memory-fill   the restorer switched to the tasks' memory and fills it
#   criu-done     CRIU logged the end of the restore: the wake helper runs
phase_reached() {
	case $1 in
	task-create) [ -n "$(runc_restoring)" ] ;;
	*) [ -n "${LOG:-}" ] && grep -Eq -- "$(pattern_of "$1")" "$LOG" 2>/dev/null ;;
	esac
}

pattern_of() {
	case $1 in
	criu-started) echo 'Forking task with' ;;
	memory-fill) echo 'Restore via sigreturn' ;;
	criu-done) echo 'Restore finished successfully' ;;
	esac
}

# phase_now: the latest phase the restore has reached (what a kill hit).
phase_now() {
	local p last=none
	[ -n "${LOG:-}" ] || LOG=$(restore_log_since "$MARK")
	for p in task-create criu-started memory-fill criu-done; do
		phase_reached "$p" && last=$p
	done
	[ "$last" != none ] || [ -z "${LOG:-}" ] || last=criu-log
	echo "$last"
}

# target_pid TARGET: the process of TARGET serving this restore, now.
target_pid() {
	case $1 in
	criu) stack_criu | head -1 ;;
	runc) runc_restoring | head -1 ;;
	shim) shim_of "$ID" | head -1 ;;
	containerd) cat "$RK_DIR/containerd.pid" ;;
	nerdctl) gone "$RUN_PID" || echo "$RUN_PID" ;;
	esac
}

# kill_at TARGET PHASE SECONDS: SIGKILL TARGET the moment the restore
# reaches PHASE (a phase may last a fraction of a second: the pid is
# found before, the log read in a tight loop). Prints the pid killed;
# fails when the restore ended or never got there, or TARGET was gone.
kill_at() {
	local target=$1 phase=$2 end=$((SECONDS + $3)) pid= pat
	while [ -z "$ID" ] && [ "$SECONDS" -lt "$end" ] && ! gone "$RUN_PID"; do
		ID=$(container_id "$NAME")
	done
	if [ "$phase" = task-create ]; then
		[ "$target" = runc ] || pid=$(target_pid "$target")
		while [ "$SECONDS" -lt "$end" ]; do
			if [ -n "$(runc_restoring)" ]; then
				[ -n "$pid" ] || pid=$(target_pid "$target")
				[ -n "$pid" ] && ! gone "$pid" && kill -KILL "$pid" && killed "$pid" task-create
				return
			fi
			gone "$RUN_PID" && return 1
		done
		return 1
	fi
	# The shim's work dir holds it; find(1) over the stack is too slow to
	# see a short phase.
	local f=$RK_DIR/root/io.containerd.runtime.v2.task/default/$ID/restore.log
	while [ -z "${LOG:-}" ] && [ "$SECONDS" -lt "$end" ] && ! gone "$RUN_PID"; do
		if [ -n "$ID" ]; then [ ! -e "$f" ] || LOG=$f; else LOG=$(restore_log_since "$MARK"); fi
	done
	[ -n "${LOG:-}" ] || return 1
	pid=$(target_pid "$target")
	[ -n "$pid" ] || [ "$target" != shim ] || { ID=$(container_id "$NAME"); pid=$(target_pid shim); }
	pat=$(pattern_of "$phase")
	while [ "$SECONDS" -lt "$end" ]; do
		grep -Eq -- "$pat" "$LOG" 2>/dev/null && break
	done
	grep -Eq -- "$pat" "$LOG" 2>/dev/null || return 1
	[ -n "$pid" ] && ! gone "$pid" && kill -KILL "$pid" && killed "$pid" "$phase"
}

# killed PID AT: "PID PHASE", the phase the restore was at when PID was
# killed: AT, the one waited for, or a later one its log shows (a killed
# runc's shim may remove the log at once).
killed() {
	local order=(task-create criu-started memory-fill criu-done) now i at=$2
	now=$(phase_now)
	for i in "${order[@]}"; do
		[ "$i" != "$at" ] || break
		[ "$i" != "$now" ] || { now=; break; }
	done
	# NOW is later than AT unless it came first in the list.
	[ -z "$now" ] || [ "$now" = none ] || [ "$now" = criu-log ] || at=$now
	echo "$1 $at"
}

# host_left NAME PORT ID: what what_is_left finds, and what the cache and
# the store hold beyond what they held before the case: a restore's hold
# or a building snapshot, a lease, the image changed.
host_left() {
	what_is_left "$@"
	# Who holds a port left bound.
	ss -Htlnp "sport = :$2" | grep -o 'users:.*' | sed 's/^/port held by /'
	k_ snapshots ls | awk '$1 ~ /building-|^checkpoint-restore\// {print "cache snapshot " $1}'
	comm -13 "$BATS_FILE_TMPDIR/leases" <(k_ leases ls -q | sort) | sed 's/^/lease /'
	# runc's state dir and its criu-root bind (issue 61, item 5).
	[ -z "$3" ] || grep -F -- "/$3/criu-root" /proc/self/mountinfo | awk '{print "criu-root mount " $5}'
	return 0
}

# settled_left NAME PORT ID: host_left once it stops shrinking (processes
# on their way out, the GC taking removed snapshots), at most ~10 s.
settled_left() {
	local left end=$((SECONDS + 10))
	while :; do
		left=$(host_left "$@")
		[ -n "$left" ] && [ "$SECONDS" -lt "$end" ] || break
		sleep 0.5
	done
	[ -z "$left" ] || echo "$left"
	# Hashing every blob takes a while: once.
	image_state | diff "$BATS_FILE_TMPDIR/image" - | sed -n 's/^> /image changed: /p'
}

# scrub NAME ID: remove what a failed case left, as docs/operations.md
# tells an operator to, so that the next case starts clean.
scrub() {
	local name=$1 id=$2 p
	# nerdctl's port reserver (a `sleep infinity` holding the host port)
	# names neither: it goes by the port.
	for p in $(ss -Htlnp "sport = :${3:-0}" | grep -o 'pid=[0-9]*' | cut -d= -f2); do
		[ "$(cat "/proc/$p/comm" 2>/dev/null)" != sleep ] || kill -KILL "$p"
	done
	timeout 60 "$REKINDLE_ROOT/scripts/nerdctl.sh" "$RK_DIR" rm -f "$name" >/dev/null 2>&1
	[ -n "$id" ] || return 0
	grep -F "/$id/criu-root" /proc/self/mountinfo | awk '{print $5}' | xargs -r -n1 umount -l
	timeout 30 "$BIN/runc" --root "$RK_DIR/runc/default" delete --force "$id" >/dev/null 2>&1
	timeout 60 "$REKINDLE_ROOT/scripts/nerdctl.sh" "$RK_DIR" rm -f "$name" >/dev/null 2>&1
	for p in /proc/[0-9]*; do
		grep -qF -- "$id" "$p/cgroup" 2>/dev/null && kill -KILL "${p#/proc/}" 2>/dev/null
		# The shim, and nerdctl's logger (CONTAINER_ID in its environment).
		{ tr '\0' ' ' <"$p/cmdline"; tr '\0' '\n' <"$p/environ"; } 2>/dev/null | grep -qF -- "$id" &&
			kill -KILL "${p#/proc/}" 2>/dev/null
	done
	for p in $(stack_criu); do kill -KILL "$p" 2>/dev/null; done
	sleep 0.5
	find /sys/fs/cgroup -depth -type d -name "*$id*" -exec rmdir {} \; 2>/dev/null
	k_ snapshots ls | awk '$1 ~ /^checkpoint-restore\// {print $1}' | xargs -r -n1 "$BIN/ctr" \
		--address "$RK_DIR/containerd.sock" -n default snapshots rm 2>/dev/null
	comm -13 "$BATS_FILE_TMPDIR/leases" <(k_ leases ls -q | sort) | xargs -r -n1 "$BIN/ctr" \
		--address "$RK_DIR/containerd.sock" -n default leases rm 2>/dev/null
	return 0
}

# summary: what_is_left's lines, one of each kind with its count (the
# full list goes to the case's .left file).
summary() {
	awk '{
		k = $1; if ($1 ~ /^(port|iptables|CNI|cache|containerd|process|criu)$/) k = $1 " " $2
		if (k ~ /^process/) k = k " " $NF
		if (!(k in n)) { order[++m] = k; first[k] = $0 }
		n[k]++
	}
	END { for (i = 1; i <= m; i++) { k = order[i]; printf "%s%s", (i > 1 ? "; " : ""), (n[k] > 1 ? k " x" n[k] : substr(first[k], 1, 110)) } }'
}

# containerd_back: start this stack's containerd again after it was killed.
containerd_back() {
	local pid
	pid=$(cat "$RK_DIR/containerd.pid")
	wait_for "containerd $pid to die" 20 gone "$pid"
	stack_up >/dev/null 2>&1 || echo "containerd-up.sh failed: $(tail -3 "$RK_DIR/containerd.log")"
}

# restores_same N: the image restores again on a new port, answers as the
# checkpointed engine did, and leaves nothing once removed; prints why not.
restores_same() {
	local name=again$1 port text
	port=$(free_port)
	if ! timeout 120 "$REKINDLE_ROOT/scripts/nerdctl.sh" "$RK_DIR" run -d --name "$name" \
		-p "127.0.0.1:$port:30000" "$IMAGE" >"$BATS_TEST_TMPDIR/again.out" 2>&1; then
		echo "nerdctl run failed: $(first_error "$BATS_TEST_TMPDIR/again.out")"
	elif ! wait_for "the next restore" 60 engine GET "$port" /health 2>/dev/null; then
		echo "the next restore never answered /health"
	else
		text=$(engine POST "$port" /generate "$PROMPT" | jq -r .text)
		[ "$text" = "$(cat "$BATS_FILE_TMPDIR/text")" ] || echo "answered '$text'"
	fi
	local id
	id=$(container_id "$name")
	timeout 60 "$REKINDLE_ROOT/scripts/nerdctl.sh" "$RK_DIR" rm -f "$name" >/dev/null 2>&1 || echo "nerdctl rm -f $name failed"
	local left
	left=$(settled_left "$name" "$port" "$id")
	[ -z "$left" ] || { echo "after its rm: $(summary <<<"$left")"; scrub "$name" "$id" "$port"; }
}

# gc_loop: the cache GC pruning everything unused, in a loop (CHAOS_GC=1).
gc_loop() {
	while :; do
		"$REKINDLE_ROOT/systemd/rekindle-cache-gc.sh" --address "$RK_DIR/containerd.sock" --max-age 0s \
			>>"$BATS_FILE_TMPDIR/gc.log" 2>&1 || echo "gc exit $?" >>"$BATS_FILE_TMPDIR/gc.log"
		sleep 0.5
	done
}

# restore_case N TARGET PHASE: one case of the restore matrix.
restore_case() {
	local n=$1 target=$2 phase=$3 port pid seen outcome left next status=0 detail=
	NAME=r$n ID=
	port=$(free_port)
	MARK=$BATS_TEST_TMPDIR/mark RUN_OUT=$BATS_TEST_TMPDIR/run.out
	touch "$MARK"
	sleep 0.01
	LOG=
	# Not through n_: RUN_PID must be nerdctl itself (nerdctl.sh execs it).
	"$REKINDLE_ROOT/scripts/nerdctl.sh" "$RK_DIR" run -d --name "$NAME" -p "127.0.0.1:$port:30000" "$IMAGE" >"$RUN_OUT" 2>&1 3>&- &
	RUN_PID=$!
	if pid=$(kill_at "$target" "$phase" 90); then
		seen=${pid#* } pid=${pid%% *}
		detail="killed $target pid $pid"
		[ "$target" != containerd ] || detail+="; $(containerd_back)"
	else
		seen="$(phase_now), no $target"
		detail="no $target process at $phase (or the restore never got there): nothing killed"
	fi
	[ -n "$ID" ] || ID=$(container_id "$NAME")
	# The client ends within 90 s, or the case hangs.
	local i
	for ((i = 0; i < 450; i++)); do
		gone "$RUN_PID" && break
		sleep 0.2
	done
	if ! gone "$RUN_PID"; then
		outcome="HUNG: nerdctl run still waiting after 90 s"
		kill -KILL "$RUN_PID" 2>/dev/null
	fi
	wait "$RUN_PID" 2>/dev/null || status=$?
	RUN_PID=
	if [ -z "${outcome:-}" ]; then
		if [ "$status" -eq 0 ]; then
			outcome="nerdctl run exit 0"
		else
			outcome="exit $status${status:+: }$(first_error "$RUN_OUT")"
			outcome=${outcome%: }
		fi
	fi
	cp "$RUN_OUT" "$CHAOS_LOGS/restore-$n-$target-$phase.out" 2>/dev/null || true
	# What an operator does after any failed run: rm -f (bounded: a hang is a finding).
	local rm
	rm=$(timeout 60 "$REKINDLE_ROOT/scripts/nerdctl.sh" "$RK_DIR" rm -f "$NAME" 2>&1) || {
		[ $? -ne 124 ] || detail+="; nerdctl rm -f HUNG 60 s"
		[[ $rm == *"no such container"* ]] || [[ $rm == *"not found"* ]] || detail+="; rm -f: $(head -1 <<<"$rm" | cut -c1-150)"
	}
	left=$(settled_left "$NAME" "$port" "$ID")
	if [ -n "$left" ]; then
		echo "$left" >"$CHAOS_LOGS/restore-$n-$target-$phase.left"
		detail+="; left: $(summary <<<"$left")"
		scrub "$NAME" "$ID" "$port"
		left=FAIL
	else
		left=PASS
	fi
	next=$(restores_same "$n")
	if [ -n "$next" ]; then
		detail+="; next restore: $next"
		next=FAIL
	else
		next=PASS
	fi
	case $detail in *"nothing killed"*) [ "$left$next" != PASSPASS ] || left=N/A next=N/A ;; esac
	record restore "$target" "$phase" "$seen" "${outcome:-}" "$left" "$next" "id=$ID; $detail"
	outcome=
}

@test "restore matrix: SIGKILL each part of a nerdctl run restore at each phase" {
	[ -n "${CHAOS_RESTORE:-}" ] || skip "no restore cases asked (CHAOS_RESTORE)"
	the_image
	[ "${CHAOS_GC:-0}" = 0 ] || { gc_loop 3>&- & GC_PID=$!; }
	local n=0 c
	for c in $CHAOS_RESTORE; do
		n=$((n + 1))
		restore_case "$n" "${c%@*}" "${c#*@}" || true
	done
}

# ---- the create matrix -----------------------------------------------------

ctr_state() {
	k_ images ls -q
	k_ leases ls -q
	k_ snapshots ls | awk 'NR > 1 {print $1}' | sort
	k_ content active
	k_ content ls -q | sort
}

# procs_of_init PID: the "COMM STATE" of PID's process tree.
tree_of() {
	local c
	[ -r "/proc/$1/status" ] || return 0
	echo "$(awk '/^State:/ {print $2}' "/proc/$1/status") $(cat "/proc/$1/comm")"
	for c in $(cat /proc/"$1"/task/*/children 2>/dev/null); do tree_of "$c"; done
}

# exes_of PID: "COMM=EXE" of PID's tree (a deleted EXE says so).
exes_of() {
	local c
	[ -r "/proc/$1/status" ] || return 0
	echo "$(cat "/proc/$1/comm")=$(readlink "/proc/$1/exe")"
	for c in $(cat /proc/"$1"/task/*/children 2>/dev/null); do exes_of "$c"; done
}

# create_case N PHASE: oci-checkpoint create SIGKILLed once it says PHASE
# began; then, once oci-checkpoint recover has undone what it left, the
# engine must answer as before, the store hold what it held, and the
# engine checkpoint and restore again.
create_case() {
	local n=$1 phase=$2 name=cc$1 port out work before seen state how= left next detail= img=rekindle.local/ckpt:chaos-create$1
	port=$(free_port)
	out=$CHAOS_LOGS/create-$n-$phase.out work=$BATS_TEST_TMPDIR/work$n
	mkdir -p "$work"
	start_engine "$name" "$port" -e "ENGINE_STATE_MB=${CHAOS_STATE_MB:-512}" >/dev/null 2>&1
	record_engine "$port"
	before=$(ctr_state)
	local extra=()
	# An engine that never says healthy keeps create in its health phase.
	[ "$phase" != health ] || extra=(--health 'GET /no_such_health')
	"$BIN/oci-checkpoint" create --work-dir "$work" "${extra[@]}" "$name" "$img" >"$out" 2>&1 3>&- &
	CREATE_PID=$!
	local i
	for ((i = 0; i < 2400; i++)); do
		grep -q "^==> $phase \.\.\.$" "$out" 2>/dev/null && break
		gone "$CREATE_PID" && break
		sleep 0.02
	done
	if grep -q "^==> $phase \.\.\.$" "$out" && ! gone "$CREATE_PID"; then
		kill -KILL "$CREATE_PID"
		seen=$(grep -o '^==> [a-z-]* \.\.\.$' "$out" | tail -1 | cut -d' ' -f2)
		grep -q "^==> $seen done" "$out" && seen+=" (done)"
	else
		seen="never: $(tail -1 "$out" | cut -c1-100)"
	fi
	wait "$CREATE_PID" 2>/dev/null
	CREATE_PID=
	sleep 1
	# What a SIGKILL left the engine as.
	state=$(n_ inspect -f '{{.State.Status}}' "$name" 2>/dev/null)
	local code
	code=$(curl -s -o /dev/null -w '%{http_code}' --max-time 5 -X POST -H 'Content-Type: application/json' \
		-d "$PROMPT" "http://127.0.0.1:$port/generate")
	local outcome="container $state, /generate $code"
	# Bring it back as the docs say (docs/operations.md, "A create was
	# killed"), and say what it did.
	if timeout 300 "$BIN/oci-checkpoint" recover "$name" >"$out.recover" 2>&1; then
		how=$(grep -o '^    [a-z]*' "$out.recover" | sort -u | tr -d ' ' | tr '\n' ' ')
	else
		detail+="oci-checkpoint recover failed: $(first_error "$out.recover"); "
	fi
	outcome+="; recover: ${how:-nothing}"
	local text=$E_TEXT pid=$E_PID
	if [ "$phase" != stop ]; then
		text=$(engine POST "$port" /generate "$PROMPT" 2>/dev/null | jq -r .text 2>/dev/null)
		pid=$(state_of "$port" pid 2>/dev/null)
	fi
	[ "$text" = "$E_TEXT" ] || detail+="the engine answers '$text' after that; "
	[ "$pid" = "$E_PID" ] || detail+="not the same engine process ($pid, was $E_PID); "
	# Leftovers: the store as before, the work dir empty, no quiesce call or
	# second helper in the container, no zombie.
	left=
	local now
	for ((i = 0; i < 50; i++)); do
		now=$(ctr_state)
		[ "$now" != "$before" ] || break
		sleep 0.2
	done
	if [ "$phase" = stop ]; then
		# The image was stored: it stays, only a lease may not.
		k_ images ls -q | grep -qxF "$img" || left+="no image stored; "
		now=$(comm -13 <(echo "$before" | sort) <(k_ leases ls -q | sort))
		[ -z "$now" ] || left+="lease $now; "
	elif [ "$now" != "$before" ]; then
		left+="store: $(diff <(echo "$before") <(echo "$now") | grep '^[<>]' | tr '\n' ';'); "
	fi
	[ -z "$(ls -A "$work")" ] || left+="work dir: $(ls -A "$work" | tr '\n' ' '); "
	local procs
	procs=$(tree_of "$(n_ inspect -f '{{.State.Pid}}' "$name" 2>/dev/null)")
	! grep -q '^Z ' <<<"$procs" || left+="zombie in the container; "
	! grep -qE ' (sh|sleep)$' <<<"$procs" || left+="a quiesce call's process; "
	[ "$(grep -c ' rekindle-wake$' <<<"$procs")" -le 1 ] || left+="$(grep -c ' rekindle-wake$' <<<"$procs") wake helpers; "
	[ -z "$detail$left" ] || detail="${detail}${left:+left: $left}"
	if [ -n "$left" ]; then left=FAIL; else left=PASS; fi
	# The leftovers of a SIGKILL go before the next create (its lease would
	# keep its blobs).
	comm -13 <(echo "$before" | sort) <(k_ leases ls -q | sort) | xargs -r -n1 "$BIN/ctr" \
		--address "$RK_DIR/containerd.sock" -n default leases rm 2>/dev/null
	rm -rf "${work:?}"/*
	# The engine checkpoints again and that image restores with its answer.
	next=
	if [ "$phase" = stop ]; then
		: # the image was stored before the kill: restore it below
		n_ rm -f "$name" >/dev/null 2>&1
	fi
	if [ "$phase" != stop ] && ! timeout 300 "$BIN/oci-checkpoint" create -q --replace --work-dir "$work" "$name" "$img" >"$out.again" 2>&1; then
		next="create again failed: $(first_error "$out.again")"
	else
		local p2
		p2=$(free_port)
		if ! timeout 120 "$REKINDLE_ROOT/scripts/nerdctl.sh" "$RK_DIR" run -d --name "$name-r" -p "127.0.0.1:$p2:30000" "$img" >"$out.run" 2>&1; then
			next="its restore failed: $(first_error "$out.run")"
		elif ! wait_for restore 60 engine GET "$p2" /health 2>/dev/null; then
			next="its restore never answered"
		elif [ "$(engine POST "$p2" /generate "$PROMPT" | jq -r .text)" != "$E_TEXT" ]; then
			next="its restore answers otherwise"
		fi
	fi
	[ -z "$next" ] || detail+="next: $next; the container's processes then: $(exes_of "$(n_ inspect -f '{{.State.Pid}}' "$name" 2>/dev/null)" | tr '\n' ' ')"
	if [ -n "$next" ]; then next=FAIL; else next=PASS; fi
	[ "$text" = "$E_TEXT" ] && [ "$pid" = "$E_PID" ] || next=FAIL
	timeout 60 "$REKINDLE_ROOT/scripts/nerdctl.sh" "$RK_DIR" rm -f "$name" "$name-r" >/dev/null 2>&1
	timeout 60 "$REKINDLE_ROOT/scripts/nerdctl.sh" "$RK_DIR" rmi -f "$img" >/dev/null 2>&1
	record create oci-checkpoint "$phase" "$seen" "$outcome" "$left" "$next" "${detail:-}"
}

@test "create matrix: SIGKILL oci-checkpoint create at each phase" {
	[ -n "${CHAOS_CREATE:-}" ] || skip "no create cases asked (CHAOS_CREATE)"
	local n=0 p
	for p in $CHAOS_CREATE; do
		n=$((n + 1))
		create_case "$n" "$p" || true
	done
}
