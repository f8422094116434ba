# Shared helpers for Rekindle's system tests, in the style of podman's
# test/system/helpers.bash. Load with `load helpers`.

bats_require_minimum_version 1.5.0

REKINDLE_ROOT=$(cd "$BATS_TEST_DIRNAME/../.." && pwd)
BIN=${REKINDLE_BIN:-$REKINDLE_ROOT/build/bin}
IMAGES=${REKINDLE_IMAGES:-$REKINDLE_ROOT/build/images}
BASE_IMAGE=rekindle.local/base:bookworm
ENGINE_IMAGE=rekindle.local/cpu-engine:latest
PATH=$BIN:$PATH
# registry_config, registry_answers
. "$REKINDLE_ROOT/scripts/registry.sh"

# The /generate request the tests send the CPU reference engine, before a
# checkpoint and after the restore.
PROMPT='{"text": "the quick brown fox", "max_new_tokens": 16}'

# ---- the stack -------------------------------------------------------------

# need_built PROGRAM...: skip the file unless build/bin has each program, and
# a containerd built with containerd-patches/ (call from setup_file).
need_built() {
	grep -q "checkpoint cache hit" "$BIN/containerd" ||
		skip "$BIN/containerd is not built with containerd-patches/ (run 'make build')"
	local p
	for p in "$@"; do
		[ -x "$BIN/$p" ] || skip "$BIN/$p is not built (run 'make build')"
	done
}

# stack_up: start a private containerd for this file (call from setup_file).
stack_up() {
	export RK_DIR=$BATS_FILE_TMPDIR/rk
	"$REKINDLE_ROOT/scripts/containerd-up.sh" "$RK_DIR" 3>&-
}

# stack_restart: stop this file's containerd and start it again with the
# configuration the environment gives now; its containers keep running.
stack_restart() {
	local pid
	pid=$(cat "$RK_DIR/containerd.pid")
	kill -TERM "$pid"
	wait_for "containerd $pid to stop" 20 gone "$pid"
	stack_up
}

# remove_containers: remove every container nerdctl lists, running or not
# (a test's teardown, also after a test that failed half way).
remove_containers() {
	local n=("$REKINDLE_ROOT/scripts/nerdctl.sh" "$RK_DIR") c
	for c in $("${n[@]}" ps -aq 2>/dev/null); do
		"${n[@]}" rm -f "$c" >/dev/null 2>&1 || true
	done
}

# remove_images GLOB [KEEP...]: remove the stack's images whose name:tag
# matches GLOB, but for the KEEP ones (a test's teardown).
remove_images() {
	local n=("$REKINDLE_ROOT/scripts/nerdctl.sh" "$RK_DIR") glob=$1 i k
	shift
	for i in $("${n[@]}" images --format '{{.Repository}}:{{.Tag}}' 2>/dev/null); do
		# shellcheck disable=SC2053 # GLOB is a pattern
		[[ $i == $glob ]] || continue
		for k in "$@"; do [ "$i" != "$k" ] || continue 2; done
		"${n[@]}" rmi -f "$i" >/dev/null 2>&1 || true
	done
}

# stack_down: stop it and remove all it left (call from teardown_file).
stack_down() {
	[ -n "${RK_DIR:-}" ] || return 0
	"$REKINDLE_ROOT/scripts/containerd-down.sh" "$RK_DIR" 3>&-
}

# load_image NAME: import build/images/NAME.tar into the stack once.
load_image() {
	local tar=$IMAGES/$1.tar
	[ -f "$tar" ] || die "$tar is missing: run 'make images'"
	run_nerdctl load -i "$tar"
}

# registry_start DIR PORT [HTPASSWD]: Debian's docker-registry on
# 127.0.0.1:PORT, its storage, config and log in DIR; with HTPASSWD (a bcrypt
# file, htpasswd -B), it takes only the users listed there (basic auth).
# Stop it with registry_stop DIR.
registry_start() {
	local dir=$1 port=$2 htpasswd=${3:-}
	command -v docker-registry >/dev/null || skip "docker-registry is not installed (make deps)"
	registry_config "$dir" "$port" "$htpasswd"
	docker-registry serve "$dir/config.yml" >"$dir/registry.log" 2>&1 3>&- &
	echo $! >"$dir/registry.pid"
	wait_for "the registry on port $port" 30 registry_answers "$port"
}

# registry_stop DIR: stop the registry registry_start started there.
registry_stop() {
	local pid
	pid=$(cat "$1/registry.pid" 2>/dev/null) || return 0
	kill "$pid" 2>/dev/null
	rm -f "$1/registry.pid"
	return 0
}

# ---- running commands ------------------------------------------------------

# run_cmd [expected-status] CMD ARGS...: run CMD, print it and its output,
# fail when its exit status differs from expected (default 0; '?' = any).
run_cmd() {
	local expect=0
	case "$1" in [0-9]* | '?') expect=$1; shift ;; esac
	echo "\$ $*" >&2
	run "$@"
	printf '%s\n' "$output" | sed 's/^/  /' >&2
	if [ "$expect" != '?' ] && [ "$status" -ne "$expect" ]; then
		die "exit status $status, expected $expect: $*"
	fi
}

run_nerdctl() {
	local expect=0
	case "$1" in [0-9]* | '?') expect=$1; shift ;; esac
	run_cmd "$expect" "$REKINDLE_ROOT/scripts/nerdctl.sh" "$RK_DIR" "$@"
}

run_ctr() {
	local expect=0
	case "$1" in [0-9]* | '?') expect=$1; shift ;; esac
	run_cmd "$expect" "$BIN/ctr" --address "$RK_DIR/containerd.sock" -n default "$@"
}

# oci_python ARGS...: python3 with tests/oci_tar.py importable (import
# oci_tar), the one writer of OCI image layout archives.
oci_python() {
	PYTHONPATH=$REKINDLE_ROOT/tests${PYTHONPATH:+:$PYTHONPATH} python3 "$@"
}

# ocicp [STATUS] ARGS...: run_cmd on oci-checkpoint.
ocicp() {
	local expect=0
	case "$1" in [0-9]* | '?') expect=$1; shift ;; esac
	run_cmd "$expect" "$BIN/oci-checkpoint" "$@"
}

# needs_avx9000 IN.tar OUT.tar NAME: the checkpoint image archive IN.tar
# (oci-checkpoint create --output) as NAME, its recorded CPU flags with
# avx9000 added.
needs_avx9000() {
	oci_python - "$@" <<-'PY'
		import sys
		import oci_tar
		src, dst, name = sys.argv[1:4]
		index, a = oci_tar.read(src)
		desc = index["manifests"][0]
		man = a.get_json(desc["digest"])
		man["annotations"]["org.rekindle.cpu.flags"] += ",avx9000"
		desc.update(a.add_json(man))
		desc["annotations"] = oci_tar.image_name(name)
		a.write(dst, [desc])
	PY
}

# ---- assertions ------------------------------------------------------------

die() {
	echo "#/vvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvv" >&2
	echo "#| FAIL: $*" >&2
	echo "#\\^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^" >&2
	false
}

# is ACTUAL EXPECTED WHAT: EXPECTED is a glob-free exact string or, when it
# starts with '~', an extended regex.
is() {
	local actual=$1 expect=$2 what=$3
	if [[ $expect == "~"* ]]; then
		[[ $actual =~ ${expect#\~} ]] && return 0
	else
		[ "$actual" = "$expect" ] && return 0
	fi
	echo "#| $what" >&2
	echo "#| expected: '$expect'" >&2
	echo "#|   actual: '$actual'" >&2
	die "$what"
}

# logged PATTERN: containerd's log (of this file's stack) has a line
# matching the basic regex PATTERN.
logged() {
	grep -q -- "$1" "$RK_DIR/containerd.log" || die "containerd did not log: $1"
}

# gone PID...: every PID has exited (a zombie counts).
gone() {
	local p
	for p in "$@"; do
		! grep -q '^State:[[:space:]]*[^Z[:space:]]' "/proc/$p/status" 2>/dev/null || return 1
	done
}

# wait_for DESC SECONDS CMD...: poll CMD until it succeeds.
wait_for() {
	local desc=$1 secs=$2 i
	shift 2
	for ((i = 0; i < secs * 5; i++)); do
		"$@" >/dev/null 2>&1 && return 0
		sleep 0.2
	done
	die "timed out after ${secs}s waiting for $desc"
}

# ---- the CPU reference engine ---------------------------------------------

# free_port: a TCP port nobody holds, outside the ephemeral range (scripts/free-ports.py says why).
free_port() {
	"$REKINDLE_ROOT/scripts/free-ports.py"
}

# engine GET|POST PORT PATH [JSON]: one HTTP call to an engine on loopback.
engine() {
	local method=$1 port=$2 path=$3 body=${4:-}
	if [ -n "$body" ]; then
		curl -fsS --max-time 10 -X "$method" -H 'Content-Type: application/json' \
			-d "$body" "http://127.0.0.1:$port$path"
	else
		curl -fsS --max-time 10 -X "$method" "http://127.0.0.1:$port$path"
	fi
}

# wait_healthy PORT: wait until the engine answers /health.
wait_healthy() {
	wait_for "engine on port $1 to be healthy" 60 engine GET "$1" /health
}

# ---- skips -----------------------------------------------------------------

skip_if_no_gpu() {
	if ! command -v nvidia-smi >/dev/null 2>&1 || ! nvidia-smi -L >/dev/null 2>&1; then
		skip "no NVIDIA GPU on this host (nvidia-smi -L fails): GPU tests run on a GPU machine through tests/gpu/run.sh (README.md, Tests)"
	fi
}

skip_if_fewer_gpus() {
	skip_if_no_gpu
	local n
	n=$(nvidia-smi -L | wc -l)
	[ "$n" -ge "$1" ] || skip "needs $1 GPUs, this host has $n"
}

# start_engine NAME PORT [nerdctl run flags...]: run the CPU reference engine
# detached, published on 127.0.0.1:PORT, and wait until it is healthy.
start_engine() {
	local name=$1 port=$2
	shift 2
	run_nerdctl run -d --name "$name" -p "127.0.0.1:$port:30000" "$@" "$ENGINE_IMAGE"
	wait_healthy "$port"
}

# state_of PORT FIELD: one field of the engine's GET /state.
state_of() {
	engine GET "$1" /state | jq -r ".$2"
}

# weights_intact PORT CONTAINER [EXEC...]: the engine on 127.0.0.1:PORT
# holds in memory the very weights its image ships. The engine hashes its
# weights buffer when asked (GET /state?verify=1: memory_sha256, computed at
# the request from the bytes the process holds, so after a restore from what
# CRIU or a resume put there), and that must be the checksum the image build
# wrote to /engine/weights.bin.sha256, read from CONTAINER with EXEC
# (default: nerdctl exec; `cri exec` for a CRI container, `podman exec`).
# PORT - reads the /state?verify=1 JSON from stdin instead, for an engine no
# host port reaches. (/state's weights_sha256 and loaded_sha256 prove
# nothing here: the engine sets both from the file, so they always agree.)
weights_intact() {
	local port=$1 ctr=$2 state want got
	shift 2
	[ $# -gt 0 ] || set -- "$REKINDLE_ROOT/scripts/nerdctl.sh" "$RK_DIR" exec
	if [ "$port" = - ]; then
		state=$(cat)
	else
		state=$(engine GET "$port" '/state?verify=1') || die "no GET /state?verify=1 from the engine on port $port"
	fi
	want=$("$@" "$ctr" cat /engine/weights.bin.sha256) || die "cannot read /engine/weights.bin.sha256 in $ctr"
	want=$(awk 'NR == 1 {print $1}' <<<"$want")
	is "$want" "~^[0-9a-f]{64}$" "the image's weights checksum in $ctr"
	got=$(jq -r .memory_sha256 <<<"$state")
	is "$(jq -r .loaded <<<"$state")" "true" "weights loaded"
	is "$got" "~^[0-9a-f]{64}$" "memory_sha256 in GET /state?verify=1 (an engine image built from images/cpu-engine/server.py as it is now?)"
	is "$got" "$want" "SHA-256 of the weights in the engine's memory vs the image's /engine/weights.bin.sha256"
}

# record_engine PORT: remember the engine's output and identity in E_*.
record_engine() {
	E_TEXT=$(engine POST "$1" /generate "$PROMPT" | jq -r .text)
	answered "before the checkpoint" "$E_TEXT"
	E_PID=$(state_of "$1" pid)
	E_START=$(state_of "$1" start_time)
	E_COUNTER=$(state_of "$1" counter)
}

# damage_cached_pages NAMESPACE LAYER: cut the end off the pages images of
# the extracted copy in the checkpoint cache entry of LAYER, as a full disk
# or damage leaves them.
damage_cached_pages() {
	local data n=0 f
	data=$("$BIN/ctr" --address "$RK_DIR/containerd.sock" -n "$1" snapshots mounts /x \
		"checkpoint-cache/$2/data-view" | grep -o '/[^ ,:]*/snapshots/[0-9]*/fs' | head -1)
	[ -d "$data/checkpoint" ] || die "no extracted checkpoint under the cache's data view: '$data'"
	for f in "$data"/checkpoint/pages-*.img; do
		[ "$(stat -c %s "$f")" -gt 65536 ] || continue
		truncate -s -64K "$f"
		n=$((n + 1))
	done
	[ "$n" -gt 0 ] || die "no pages image to damage in $data/checkpoint"
}

# answered WHAT TEXT: TEXT is a real answer, not empty or null, so that a
# later "same output" check cannot pass on two empty sides.
answered() {
	[ -n "$2" ] && [ "$2" != null ] || die "no generation $1: '$2'"
}

# ---- the restore policy and signatures (450, 350) --------------------------

# refused_by_policy OUTPUT NAME: OUTPUT is the policy's error for checkpoint
# image NAME (normalized: no tag), naming the option and the fix.
refused_by_policy() {
	local out=${1//\\\"/\"} name=$2 # logrus and klog escape the quotes
	[[ $out == *"may not be restored on this host"* ]] || die "the error does not say the image may not be restored"
	[[ $out == *"checkpoint_restore_images in [plugins.'io.containerd.service.v1.tasks-service']"* ]] ||
		die "the error does not name the option"
	[[ $out == *"\"$name\""*"matches none of its patterns"* ]] || die "the error does not name the image $name"
	[[ $out == *"add \"$name\", or a pattern that matches it"* ]] || die "the error does not give the fix"
}

# make_keys: an Ed25519 key pair as an operator makes one, in $KEYS: the
# signer's team.key (private), the hosts' team.pub.
make_keys() {
	command -v openssl >/dev/null || skip "openssl is not installed"
	KEYS=$BATS_FILE_TMPDIR/keys
	[ -f "$KEYS/team.pub" ] && return 0
	mkdir -p "$KEYS"
	openssl genpkey -algorithm ed25519 -out "$KEYS/team.key" 2>/dev/null || die "openssl cannot make an Ed25519 key"
	openssl pkey -in "$KEYS/team.key" -pubout -out "$KEYS/team.pub" || die "openssl cannot write the public key"
}

# refused_by_signature OUTPUT IMAGE WHAT: OUTPUT is the signature policy's
# error for checkpoint image IMAGE, naming the option and saying WHAT.
refused_by_signature() {
	local out=${1//\\\"/\"} image=$2 what=$3
	[[ $out == *"checkpoint image $image may not be restored on this host"* ]] || die "the error does not name the image $image"
	[[ $out == *"checkpoint_restore_require_signature in [plugins.'io.containerd.service.v1.tasks-service'] is true"* ]] ||
		die "the error does not name the option"
	[[ $out == *"$what"* ]] || die "the error does not say: $what"
}

# ---- the weight-set service (docs/weights.md) ------------------------------

# weights_env: where this file's weights service lives, started or not: its
# folder, its socket, and the nerdctl config that names its CDI specs (a
# test that finds the service an earlier test started needs them too).
weights_env() {
	export WEIGHTS_DIR=$BATS_FILE_TMPDIR/weights
	export REKINDLE_WEIGHTS_SOCKET=$WEIGHTS_DIR/weights.sock NERDCTL_TOML=$WEIGHTS_DIR/nerdctl.toml
}

# weights_up [serve flags...]: start rekindle-weights for this file with its
# root, socket, state and CDI spec under $BATS_FILE_TMPDIR/weights, and
# point nerdctl at that CDI dir (NERDCTL_TOML) instead of /etc/cdi. Its pid
# goes to a file: a test may restart it, teardown_file stops the last one.
weights_up() {
	weights_env
	mkdir -p "$WEIGHTS_DIR/cdi"
	# The host's own specs too: a GPU (nvidia.com/gpu) beside a set.
	printf 'cdi_spec_dirs = ["%s", "/etc/cdi", "/var/run/cdi"]\n' "$WEIGHTS_DIR/cdi" >"$NERDCTL_TOML"
	setsid "$BIN/rekindle-weights" serve --root "$WEIGHTS_DIR/root" --state "$WEIGHTS_DIR/state/sets.json" \
		--cdi-dir "$WEIGHTS_DIR/cdi" "$@" >>"$WEIGHTS_DIR/weights.log" 2>&1 </dev/null 3>&- &
	echo $! >"$WEIGHTS_DIR/weights.pid"
	wait_for "rekindle-weights on $REKINDLE_WEIGHTS_SOCKET" 20 "$BIN/rekindle-weights" list
}

# weights_stop: stop the service (its sets stay in memory).
weights_stop() {
	local pid i
	pid=$(cat "${WEIGHTS_DIR:-/nonexistent}/weights.pid" 2>/dev/null) || return 0
	kill "$pid" 2>/dev/null
	for ((i = 0; i < 100; i++)); do
		gone "$pid" && break
		sleep 0.1
	done
	rm -f "$WEIGHTS_DIR/weights.pid"
}

# weights_down: stop it and unmount the tmpfs it mounted (the service
# itself never unmounts it: sets outlive the service).
weights_down() {
	[ -n "${WEIGHTS_DIR:-}" ] || return 0
	weights_stop
	if mountpoint -q "$WEIGHTS_DIR/root/sets"; then
		umount "$WEIGHTS_DIR/root/sets" || umount -l "$WEIGHTS_DIR/root/sets"
	fi
}

# ---- crafted checkpoint images ---------------------------------------------

# craft IMG PYTHON: decode the CRIU image IMG with crit, let PYTHON change
# the JSON (bound to d), encode it again in place.
craft() {
	local img=$1
	"$BIN/crit" decode -i "$img" -o "$img.json" || die "crit decode $img"
	python3 -c "import json, sys
d = json.load(open(sys.argv[1]))
$2
json.dump(d, open(sys.argv[1], 'w'))" "$img.json" || die "crafting $img"
	"$BIN/crit" encode -i "$img.json" -o "$img" || die "crit encode $img"
	rm "$img.json"
}

# root_file IMG NAME FD [FLAGS]: add to IMG a regular file NAME of the rootfs
# that the root task holds at FD, opened with FLAGS (2, O_RDWR, by default).
root_file() {
	local img=$1 name=$2 fd=$3 flags=${4:-2} files
	files=$(python3 -c 'import json, subprocess, sys
tree = json.loads(subprocess.check_output([sys.argv[1], "decode", "-i", sys.argv[2] + "/pstree.img"]))
ids = json.loads(subprocess.check_output([sys.argv[1], "decode", "-i", "%s/ids-%d.img" % (sys.argv[2], tree["entries"][0]["pid"])]))
print(ids["entries"][0]["files_id"])' "$BIN/crit" "$img") || die "reading the root task's files id"
	craft "$img/files.img" "
root = min(e['reg']['mnt_id'] for e in d['entries'] if e.get('reg', {}).get('name') == '/')
own = {'uid': 0, 'euid': 0, 'signum': 0, 'pid_type': 0, 'pid': 0}
d['entries'].append({'type': 'REG', 'id': 9999, 'reg': {'id': 9999, 'flags': $flags, 'pos': '0', 'fown': own,
	'name': '$name', 'mnt_id': root, 'mode': 0o100644}})
"
	craft "$img/fdinfo-$files.img" "d['entries'].append({'id': 9999, 'flags': 0, 'type': 'REG', 'fd': $fd})"
}

# canaries: a folder only root may enter, holding a file that says "safe",
# for a crafted image to aim at.
canaries() {
	CANARY=$BATS_TEST_TMPDIR/canary
	mkdir -p "$CANARY/victim"
	chmod 0700 "$CANARY/victim"
	echo safe >"$CANARY/victim/canary"
}

canaries_intact() {
	is "$(stat -c %a "$CANARY/victim")" "700" "the canary folder's mode"
	[ -e "$CANARY/victim/canary" ] || die "the canary file was deleted"
	is "$(cat "$CANARY/victim/canary")" "safe" "the canary file"
	[ ! -e "$CANARY/newdir" ] || die "$CANARY/newdir was created"
}
