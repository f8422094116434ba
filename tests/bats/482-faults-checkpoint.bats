#!/usr/bin/env bats
# Faults on the checkpoint side (issue 61): oci-checkpoint create interrupted
# at each phase leaves the engine running and resumed and nothing half made;
# a container create stopped gives back its address and ports; the wake
# helper leaves no zombie under an engine's PID 1 that never reaps.

load helpers

setup_file() {
	need_built oci-checkpoint rekindle-wake
	stack_up
	load_image base
	load_image cpu-engine
	export CONTAINERD_ADDRESS=$RK_DIR/containerd.sock
}

teardown() {
	[ -n "${RK_DIR:-}" ] || return 0
	if [ -f "$BATS_TEST_TMPDIR/shim.pid" ]; then
		kill -CONT "$(cat "$BATS_TEST_TMPDIR/shim.pid")" 2>/dev/null || true
	fi
	if [ -f "$BATS_TEST_TMPDIR/create.pid" ]; then
		kill -KILL "$(cat "$BATS_TEST_TMPDIR/create.pid")" 2>/dev/null || true
	fi
	remove_containers
	remove_images '*' "$BASE_IMAGE" "$ENGINE_IMAGE"
}

teardown_file() {
	stack_down
}

ctr_() { "$BIN/ctr" --address "$CONTAINERD_ADDRESS" -n default "$@"; }

# store_state: what this stack holds that a checkpoint could leave behind:
# images, leases, snapshots, content being written and blobs.
store_state() {
	ctr_ images ls -q
	ctr_ leases ls -q
	ctr_ snapshots ls | awk 'NR > 1 {print $1}' | sort
	ctr_ content active
	ctr_ content ls -q | sort
}

# cni_ip NAME: the address host-local gave container NAME (its allocation
# file names NAMESPACE-ID), "" when none.
cni_ip() {
	local id
	id=$("$REKINDLE_ROOT/scripts/nerdctl.sh" "$RK_DIR" inspect -f '{{.ID}}' "$1")
	grep -l -- "^default-$id" /var/lib/cni/networks/bridge/* 2>/dev/null | xargs -r -n1 basename
}

# procs_of NAME: the container's processes, zombies included (they leave
# the cgroup, so ctr tasks ps misses them), as "PID STATE COMM" lines, PID
# as the container sees it: the tree under its init, from the host's /proc.
procs_of() {
	local init
	init=$("$REKINDLE_ROOT/scripts/nerdctl.sh" "$RK_DIR" inspect -f '{{.State.Pid}}' "$1")
	tree_of "$init"
}

tree_of() {
	local c
	[ -r "/proc/$1/status" ] || return 0
	echo "$(awk '/^NSpid:/ {print $NF}' "/proc/$1/status") $(awk '/^State:/ {print $2}' "/proc/$1/status") $(cat "/proc/$1/comm")"
	for c in $(cat /proc/"$1"/task/*/children 2>/dev/null); do
		tree_of "$c"
	done
}

@test "after create stops the engine its address and ports are free: the image restores on the same host port" {
	local port image=rekindle.local/ckpt:same-port ip
	port=$(free_port)
	start_engine psrc "$port"
	ip=$(cni_ip psrc)
	[ -n "$ip" ] || die "no CNI address recorded for psrc"
	record_engine "$port"
	ocicp create psrc "$image"
	run_nerdctl ps -a --filter name=psrc --format '{{.Status}}'
	is "${lines[-1]}" "Created" "the source container after create: stopped, its task deleted"
	is "$(cni_ip psrc)" "" "CNI address of the stopped source container"
	! ss -Hltn "sport = :$port" | grep -q . || die "host port $port still held: $(ss -Hltnp "sport = :$port")"
	# README's flow on one host: the source container is still there.
	run_nerdctl run -d --name pdst -p "127.0.0.1:$port:30000" "$image"
	wait_for "the restored engine" 30 engine GET "$port" /health
	is "$(engine POST "$port" /generate "$PROMPT" | jq -r .text)" "$E_TEXT" "the restored engine's answer on the same port"
	run_nerdctl rm -f pdst psrc
}

# ---- create interrupted ----------------------------------------------------

# create_bg OUT ARGS...: oci-checkpoint create ARGS in the background, its
# output in OUT, its pid in CREATE_PID (teardown kills it if left).
create_bg() {
	local out=$1
	shift
	"$BIN/oci-checkpoint" create "$@" >"$out" 2>&1 3>&- &
	CREATE_PID=$!
	echo "$CREATE_PID" >"$BATS_TEST_TMPDIR/create.pid"
}

# interrupt_at PHASE SIGNAL OUT: once create's OUT says PHASE began, send
# SIGNAL, and a second one a moment later (the undo must not be cut short),
# then wait for create to end: its status in CREATE_STATUS.
interrupt_at() {
	local phase=$1 sig=$2 out=$3 i
	for ((i = 0; i < 1200; i++)); do
		grep -q "^==> $phase \.\.\.$" "$out" && break
		sleep 0.05
	done
	grep -q "^==> $phase \.\.\.$" "$out" || die "create never began $phase: $(cat "$out")"
	kill -"$sig" "$CREATE_PID"
	sleep 0.1
	kill -"$sig" "$CREATE_PID" 2>/dev/null || true
	CREATE_STATUS=0
	wait "$CREATE_PID" || CREATE_STATUS=$?
	rm -f "$BATS_TEST_TMPDIR/create.pid"
	sed 's/^/  create: /' "$out" >&2
}

# engine_up NAME: start the CPU engine as NAME with STATE_MB MiB of state
# (so that the dump and packaging take a while), record its answer, what
# the store holds (BEFORE) and a work dir (WORK).
engine_up() {
	PORT=$(free_port)
	start_engine "$1" "$PORT" -e "ENGINE_STATE_MB=${STATE_MB:-0}"
	record_engine "$PORT"
	BEFORE=$(store_state)
	WORK=$BATS_TEST_TMPDIR/work
	mkdir -p "$WORK"
}

store_is() { [ "$(store_state)" = "$1" ]; }

# undone NAME IMAGE: after an interrupted create the engine in NAME runs,
# unpaused, resumed, the same process answering as before, with no
# process of the checkpoint's left in it (a quiesce exec, a second helper);
# no image, lease, snapshot, ingest or blob of the checkpoint is left, nor
# its work dir.
undone() {
	local name=$1 image=$2
	run_nerdctl inspect -f '{{.State.Status}}' "$name"
	is "${lines[-1]}" "running" "the engine container after the interrupted create (not paused)"
	is "$(state_of "$PORT" loaded)" "true" "the engine's weights (its resume was called)"
	engine GET "$PORT" /health >/dev/null || die "the engine is not healthy"
	is "$(engine POST "$PORT" /generate "$PROMPT" | jq -r .text)" "$E_TEXT" "the engine's answer after the interrupted create"
	is "$(state_of "$PORT" pid)" "$E_PID" "the same engine process"
	is "$(ls -A "$WORK")" "" "what is left in the work dir"
	run_nerdctl 1 image inspect "$image"
	wait_for "the store to hold what it held before create" 20 store_is "$BEFORE"
	local procs
	procs=$(procs_of "$name")
	! grep -q ' Z ' <<<"$procs" || die "a zombie in the container: $procs"
	! grep -q 'sh$\|sleep$' <<<"$procs" || die "a quiesce call's process left in the container: $procs"
	is "$(grep -c 'rekindle-wake' <<<"$procs")" "~^[01]$" "wake helpers in the container"
}

@test "SIGINT during a quiesce call: the call ends, the engine is resumed, exit 130 naming the signal, nothing left" {
	local image=rekindle.local/ckpt:int-quiesce out=$BATS_TEST_TMPDIR/create.out
	engine_up iq
	# A quiesce whose second call takes a while: the signal lands in it,
	# after the weights were released.
	create_bg "$out" --engine generic --port 30000 --work-dir "$WORK" \
		--quiesce 'POST /release_memory_occupation' --quiesce 'exec sleep 2' \
		--resume 'POST /resume_memory_occupation' iq "$image"
	interrupt_at quiesce INT "$out"
	is "$CREATE_STATUS" "130" "create's exit status after SIGINT"
	grep -q "error: interrupted by SIGINT during quiesce; no image was written (the engine was resumed and is running)" "$out" ||
		die "the error does not name the signal, the phase and the outcome"
	grep -q "==> SIGINT again: still undoing" "$out" || die "the second signal was not said"
	undone iq "$image"
}

@test "SIGTERM during the dump: the dump ends, the engine is unpaused and resumed, exit 143, nothing left" {
	local image=rekindle.local/ckpt:int-dump out=$BATS_TEST_TMPDIR/create.out
	STATE_MB=1024 engine_up idump
	create_bg "$out" --work-dir "$WORK" idump "$image"
	interrupt_at dump TERM "$out"
	is "$CREATE_STATUS" "143" "create's exit status after SIGTERM"
	grep -q "error: interrupted by SIGTERM during dump; no image was written (the engine was resumed and is running)" "$out" ||
		die "the error does not name the signal, the phase and the outcome"
	! grep -q "resuming the engine failed too" "$out" || die "the undo failed"
	undone idump "$image"
	# The engine checkpoints again, as if nothing had happened.
	ocicp create --work-dir "$WORK" idump "$image"
	run_nerdctl image inspect "$image"
}

@test "SIGINT during packaging: the engine is resumed, exit 130, no image, layer, lease or ingest left" {
	local image=rekindle.local/ckpt:int-package out=$BATS_TEST_TMPDIR/create.out
	STATE_MB=1024 engine_up ipkg
	create_bg "$out" --work-dir "$WORK" ipkg "$image"
	interrupt_at package INT "$out"
	is "$CREATE_STATUS" "130" "create's exit status after SIGINT"
	grep -q "error: interrupted by SIGINT during package; no image was written (the engine was resumed and is running)" "$out" ||
		die "the error does not name the signal, the phase and the outcome"
	undone ipkg "$image"
}

@test "SIGINT while waiting for the engine's health: nothing was changed, exit 130" {
	local image=rekindle.local/ckpt:int-health out=$BATS_TEST_TMPDIR/create.out
	engine_up ihealth
	# A health call that never answers 2xx keeps create waiting.
	create_bg "$out" --work-dir "$WORK" --health 'GET /no_such_health' ihealth "$image"
	interrupt_at health INT "$out"
	is "$CREATE_STATUS" "130" "create's exit status after SIGINT"
	grep -q "error: interrupted by SIGINT during health; nothing was changed, the engine is left running" "$out" ||
		die "the error does not say nothing was changed"
	undone ihealth "$image"
	is "$(state_of "$PORT" releases)" "0" "the engine was never released"
}

# ---- create SIGKILLed ------------------------------------------------------
# A SIGKILL (the OOM killer, kill -9) leaves create no chance to undo what it
# did; what it recorded on the host as it went lets the next create of the
# container, or oci-checkpoint recover, undo it.

# kill_create PHASE OUT [CMD...]: once create's OUT says PHASE began and CMD
# (if given) succeeds, SIGKILL create; KILLED_PID is its pid, KILLED_AT the
# phase it had begun last.
kill_create() {
	local phase=$1 out=$2 i
	shift 2
	for ((i = 0; i < 6000; i++)); do
		if grep -q "^==> $phase \.\.\.$" "$out" && { [ $# -eq 0 ] || "$@" 2>/dev/null; }; then
			break
		fi
		gone "$CREATE_PID" && break
		sleep 0.01
	done
	gone "$CREATE_PID" && die "create ended before it could be killed at $phase: $(cat "$out")"
	grep -q "^==> $phase \.\.\.$" "$out" && { [ $# -eq 0 ] || "$@"; } || die "create never began $phase${1:+ with $*}: $(cat "$out")"
	kill -KILL "$CREATE_PID"
	KILLED_PID=$CREATE_PID
	wait "$CREATE_PID" 2>/dev/null || true
	rm -f "$BATS_TEST_TMPDIR/create.pid"
	KILLED_AT=$(grep -o '^==> [a-z-]* \.\.\.$' "$out" | tail -1 | cut -d' ' -f2)
	sed 's/^/  killed create: /' "$out" >&2
}

init_of() { "$REKINDLE_ROOT/scripts/nerdctl.sh" "$RK_DIR" inspect -f '{{.State.Pid}}' "$1"; }

# waiter_under INIT: a wake helper is among INIT's children: the waiter,
# reparented once the start that forked it exited.
waiter_under() {
	local c
	for c in $(cat /proc/"$1"/task/*/children 2>/dev/null); do
		[ "$(cat "/proc/$c/comm" 2>/dev/null)" = rekindle-wake ] && return 0
	done
	return 1
}

is_paused() { [ "$("$REKINDLE_ROOT/scripts/nerdctl.sh" "$RK_DIR" inspect -f '{{.State.Status}}' "$1")" = paused ]; }

# shim_of NAME: the pid of container NAME's runc shim (its init's parent).
shim_of() {
	local init
	init=$("$REKINDLE_ROOT/scripts/nerdctl.sh" "$RK_DIR" inspect -f '{{.State.Pid}}' "$1")
	awk '/^PPid:/ {print $2}' "/proc/$init/status"
}

# next_phase PHASE: the phase create begins after PHASE (its phase.Order),
# none after the last.
next_phase() {
	local order=(health preflight quiesce inject-helper record dump package resume stop) i
	for ((i = 0; i < ${#order[@]} - 1; i++)); do
		[ "${order[i]}" != "$1" ] || { echo "${order[i + 1]}"; return 0; }
	done
}

# undid OUTPUT NAME PHASE: OUTPUT names the killed create, container NAME
# and the phase, and says the lease went and the undo ended. Create records
# a phase as begun before it prints it: killed between the two, it printed
# PHASE and recorded the next one, which the undo names.
undid() {
	local at=$3 next
	next=$(next_phase "$3")
	[ -z "$next" ] || at="($3|$next)"
	grep -Eq "^==> an earlier oci-checkpoint create \(pid $KILLED_PID, started [0-9: -]*\) of container $2 was killed at $at; undoing it:\$" <<<"$1" ||
		die "no line naming the killed create (pid $KILLED_PID), container $2 and phase $at"
	grep -q "^    removed its lease rekindle-create-" <<<"$1" || die "the lease's removal is not said"
	grep -q "^==> undone$" <<<"$1" || die "the undo did not end"
}

# kept_only IMAGE NAME: the engine in NAME runs as before (same process,
# same answer, one wake helper running its current file, no zombie), and
# all that is left of the checkpoints is IMAGE: once removed, the store
# holds what it held before and the work dir is empty.
kept_only() {
	local image=$1 name=$2 procs
	run_nerdctl inspect -f '{{.State.Status}}' "$name"
	is "${lines[-1]}" "running" "the engine container"
	is "$(state_of "$PORT" pid)" "$E_PID" "the same engine process"
	is "$(engine POST "$PORT" /generate "$PROMPT" | jq -r .text)" "$E_TEXT" "the engine's answer"
	procs=$(procs_of "$name")
	! grep -q ' Z ' <<<"$procs" || die "a zombie in the container: $procs"
	is "$(grep -c ' rekindle-wake$' <<<"$procs")" "1" "wake helpers in the container"
	local init
	init=$("$REKINDLE_ROOT/scripts/nerdctl.sh" "$RK_DIR" inspect -f '{{.State.Pid}}' "$name")
	! ls -l /proc/*/exe 2>/dev/null | grep -q '/.rekindle/rekindle-wake (deleted)' ||
		die "a helper runs from a replaced file (CRIU's ghost file): $(ls -l /proc/*/exe 2>/dev/null | grep rekindle-wake)"
	is "$(ls -A "$WORK")" "" "what is left in the work dir"
	ocicp rm "$image"
	wait_for "the store to hold what it held before create" 20 store_is "$BEFORE"
}

@test "SIGKILL once the wake helper runs: the next create resumes the engine through that helper, reuses it and checkpoints" {
	local image=rekindle.local/ckpt:kill-helper out=$BATS_TEST_TMPDIR/create.out
	STATE_MB=256 engine_up khelp
	create_bg "$out" --work-dir "$WORK" khelp "$image"
	kill_create inject-helper "$out" waiter_under "$(init_of khelp)"
	is "$KILLED_AT" "~^(inject-helper|record|dump)$" "the phase create was killed in"
	# The engine was left released: the next create undoes that first.
	ocicp create --leave-running --health-timeout 20s --work-dir "$WORK" khelp "$image"
	undid "$output" khelp "$KILLED_AT"
	grep -q "^    resumed the engine through the wake helper it had started (pid [0-9]*)" <<<"$output" ||
		die "the engine was not resumed through the helper the killed create started"
	grep -q "^    removed its work directory $WORK/oci-checkpoint-" <<<"$output" || die "the work dir's removal is not said"
	kept_only "$image" khelp
}

@test "SIGKILL during the dump: oci-checkpoint recover unpauses and resumes the engine and removes the lease and work dir; create then checkpoints" {
	local image=rekindle.local/ckpt:kill-dump out=$BATS_TEST_TMPDIR/create.out paused=
	STATE_MB=1024 engine_up kdump
	create_bg "$out" --work-dir "$WORK" kdump "$image"
	# CRIU writes the pages into the work dir: the dump is under way.
	kill_create dump "$out" compgen -G "$WORK/oci-checkpoint-*/archive/checkpoint/pages-*.img"
	sleep 1 # what the kill does to the dump in flight
	! is_paused kdump || paused=1
	echo "the container after the kill: $("$REKINDLE_ROOT/scripts/nerdctl.sh" "$RK_DIR" inspect -f '{{.State.Status}}' kdump)" >&2
	[ -n "$(ls -A "$WORK")" ] || die "the killed create left no work dir: nothing to undo?"
	ocicp recover kdump
	undid "$output" kdump dump
	[ -z "$paused" ] || grep -q "^    unpaused the container" <<<"$output" || die "the paused container's thaw is not said"
	grep -q "^    resumed the engine through the wake helper" <<<"$output" || die "the engine's resume is not said"
	undone kdump "$image"
	ocicp recover kdump
	grep -q "^==> no killed create left anything to undo$" <<<"$output" || die "a second recover found something: $output"
	ocicp create --leave-running --work-dir "$WORK" kdump "$image"
	kept_only "$image" kdump
}

@test "SIGKILL during packaging: the next create resumes the engine, removes the lease, its snapshots, ingests and work dir, and checkpoints" {
	local image=rekindle.local/ckpt:kill-package out=$BATS_TEST_TMPDIR/create.out
	STATE_MB=1024 engine_up kpkg
	create_bg "$out" --work-dir "$WORK" kpkg "$image"
	kill_create package "$out"
	[ "$(store_state)" != "$BEFORE" ] || die "the killed create left nothing in the store: nothing to undo?"
	ocicp create --leave-running --health-timeout 20s --work-dir "$WORK" kpkg "$image"
	undid "$output" kpkg package
	kept_only "$image" kpkg
}

@test "SIGKILL in the stop phase: oci-checkpoint recover stops the container as asked and keeps the stored image, which restores" {
	local image=rekindle.local/ckpt:kill-stop out=$BATS_TEST_TMPDIR/create.out shim port leases
	STATE_MB=256 engine_up kstop
	leases=$(ctr_ leases ls -q | sort)
	create_bg "$out" --work-dir "$WORK" kstop "$image"
	# The stop phase is short: with the container's shim stopped during
	# packaging (which does not call it), create waits in stop for the task.
	wait_for "create's packaging" 120 grep -q '^==> package \.\.\.$' "$out"
	shim=$(shim_of kstop)
	echo "$shim" >"$BATS_TEST_TMPDIR/shim.pid"
	kill -STOP "$shim"
	kill_create stop "$out"
	kill -CONT "$shim"
	rm -f "$BATS_TEST_TMPDIR/shim.pid"
	is "$KILLED_AT" "stop" "the phase create was killed in"
	run_nerdctl image inspect "$image"
	ocicp recover kstop
	undid "$output" kstop stop
	# The kill that create had asked the shim for may have landed once
	# the shim went on: then only its task is left to delete.
	grep -Eq "^    (stopped the container|deleted the container's stopped task), as create was asked to \(the image $image it stored is kept\)" <<<"$output" ||
		die "the container's stop is not said"
	run_nerdctl ps -a --filter name=kstop --format '{{.Status}}'
	is "${lines[-1]}" "Created" "the source container after recover: stopped, its task deleted"
	is "$(ls -A "$WORK")" "" "what is left in the work dir"
	is "$(ctr_ leases ls -q | sort)" "$leases" "the leases after recover"
	port=$(free_port)
	run_nerdctl run -d --name kstop-r -p "127.0.0.1:$port:30000" "$image"
	wait_for "the restored engine" 30 engine GET "$port" /health
	is "$(engine POST "$port" /generate "$PROMPT" | jq -r .text)" "$E_TEXT" "the restored engine's answer"
}

@test "a create of a container that another create is checkpointing is refused, naming it; that one goes on undisturbed" {
	local image=rekindle.local/ckpt:live out=$BATS_TEST_TMPDIR/create.out status
	STATE_MB=1024 engine_up klive
	create_bg "$out" --leave-running --work-dir "$WORK" klive "$image"
	wait_for "the first create's dump" 60 grep -q '^==> dump \.\.\.$' "$out"
	ocicp 1 create --work-dir "$WORK" klive rekindle.local/ckpt:live-second
	grep -q "error: container klive is held by oci-checkpoint create (pid $CREATE_PID, started [0-9: -]*), which is still running: wait for it to end, or interrupt it (SIGINT undoes what it did); nothing was changed" <<<"$output" ||
		die "the refusal does not name the running create"
	ocicp 1 recover klive
	grep -q "container klive is held by oci-checkpoint create (pid $CREATE_PID" <<<"$output" || die "recover does not refuse the running create"
	status=0
	wait "$CREATE_PID" || status=$?
	rm -f "$BATS_TEST_TMPDIR/create.pid"
	sed 's/^/  first create: /' "$out" >&2
	is "$status" "0" "the first create's exit status"
	run_nerdctl 1 image inspect rekindle.local/ckpt:live-second
	kept_only "$image" klive
}

# ---- the wake helper under a PID 1 that never reaps ------------------------

# image_tasks IMAGE: the processes IMAGE's checkpoint holds, as "PID STATE
# COMM" lines (STATE as CRIU records it: 1 alive, 2 a zombie), from its
# CRIU images.
image_tasks() {
	local c=("$BIN/ctr" -a "$CONTAINERD_ADDRESS") d=$BATS_TEST_TMPDIR/img-$RANDOM layer pid
	mkdir -p "$d"
	layer=$("${c[@]}" content get "$("${c[@]}" images ls | awk -v i="$1" '$1 == i {print $3}')" | jq -r '.layers[0].digest')
	"${c[@]}" content get "$layer" | tar -x -C "$d" --wildcards 'checkpoint/pstree.img' 'checkpoint/core-*.img'
	"$BIN/crit" decode -i "$d/checkpoint/pstree.img" -o "$d/pstree.json"
	for pid in $(jq -r '.entries[].pid' "$d/pstree.json"); do
		"$BIN/crit" decode -i "$d/checkpoint/core-$pid.img" -o "$d/core.json"
		echo "$pid $(jq -r '.entries[0].tc.task_state' "$d/core.json") $(jq -r '.entries[0].tc.comm' "$d/core.json")"
	done
	rm -rf "$d"
}

@test "the wake helper leaves no zombie under the engine's PID 1, which never reaps; a checkpoint of the restored engine holds one armed helper" {
	local port image=rekindle.local/ckpt:helper again=rekindle.local/ckpt:helper-again procs tasks
	port=$(free_port)
	start_engine hsrc "$port"
	record_engine "$port"
	ocicp create hsrc "$image"
	run_nerdctl rm -f hsrc
	run_nerdctl run -d --name hdst -p "127.0.0.1:$port:30000" "$image"
	wait_for "the wake helper's status" 30 "$REKINDLE_ROOT/scripts/nerdctl.sh" "$RK_DIR" exec hdst cat /.rekindle/status
	is "$(engine POST "$port" /generate "$PROMPT" | jq -r .text)" "$E_TEXT" "the restored engine's answer"
	wait_for "the helper to have finished its wake" 10 sh -c "! $REKINDLE_ROOT/scripts/nerdctl.sh $RK_DIR exec hdst test -e /.rekindle/wake.pid"
	sleep 0.5
	procs=$(procs_of hdst)
	echo "$procs" >&2
	! grep -q ' Z ' <<<"$procs" || die "a zombie in the restored container: $procs"
	is "$(grep -c ' rekindle-wake$' <<<"$procs")" "1" "wake helpers in the restored container (one, idle)"

	# The restored engine checkpointed again: the new image holds one
	# helper, alive and armed, and no zombie.
	ocicp create hdst "$again"
	tasks=$(image_tasks "$again")
	echo "$tasks" >&2
	! grep -q '^[0-9]* 2 ' <<<"$tasks" || die "the second checkpoint holds a zombie: $tasks"
	is "$(grep -c ' 1 rekindle-wake$' <<<"$tasks")" "1" "live wake helpers in the second checkpoint"
	run_nerdctl rm -f hdst
	port=$(free_port)
	run_nerdctl run -d --name hdst2 -p "127.0.0.1:$port:30000" "$again"
	wait_for "the second restore's helper status" 30 "$REKINDLE_ROOT/scripts/nerdctl.sh" "$RK_DIR" exec hdst2 cat /.rekindle/status
	is "$(engine POST "$port" /generate "$PROMPT" | jq -r .text)" "$E_TEXT" "the engine restored from the second checkpoint"
	procs=$(procs_of hdst2)
	! grep -q ' Z ' <<<"$procs" || die "a zombie after the second restore: $procs"
	run_nerdctl rm -f hdst2
}
