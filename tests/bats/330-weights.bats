#!/usr/bin/env bats
# rekindle-weights: weight sets loaded once into a tmpfs, bound into
# containers through CDI, kept out of checkpoints (the mapping is an
# external bind mount), loaded on demand by the CDI hook when a restore
# finds them missing; bad input fails clearly and leaves nothing behind.
# A set's allow list names what the runtime vouches for (containerd
# namespace, CRI pod namespace, verified service account), not names.

load helpers
load cri

QUOTA=400M

setup_file() {
	[ -x "$BIN/rekindle-weights" ] || skip "$BIN/rekindle-weights is not built (run 'make build')"
	need_built
	stack_up
	load_image base
	export CONTAINERD_ADDRESS=$RK_DIR/containerd.sock
	# The cluster's service account signing key, as the API server's.
	openssl genrsa -out "$BATS_FILE_TMPDIR/sa.key" 2048 2>/dev/null
	openssl rsa -in "$BATS_FILE_TMPDIR/sa.key" -pubout -out "$BATS_FILE_TMPDIR/sa.pub" 2>/dev/null
	weights_start
	# Where the CRI test puts a copy of the set's CDI spec (cri_ready).
	export CRI_CDI_SPEC=/var/run/cdi/rekindle-weights-bats-330-$$.json
	export SRC=$BATS_FILE_TMPDIR/src
	mkdir -p "$SRC/small" "$SRC/big"
	# 40 MiB + 8 MiB of random bytes: a set that would show in a checkpoint.
	gen_safetensors "$SRC/small/model-1.safetensors" 40
	gen_safetensors "$SRC/small/model-2.safetensors" 8
	export SMALL_BYTES=$(($(stat -c %s "$SRC"/small/model-1.safetensors) + $(stat -c %s "$SRC"/small/model-2.safetensors)))
	run_w load --allow containerd:default small "$SRC/small"
}

teardown_file() {
	rm -f "$CRI_CDI_SPEC"
	stack_down
	weights_down
}

weights_start() { weights_up --quota "$QUOTA" --sa-keys "$BATS_FILE_TMPDIR/sa.pub"; }

# gen_safetensors FILE MIB [sparse]: a safetensors file holding one U8
# tensor of MIB MiB of random bytes (or of a hole, quick to write).
gen_safetensors() {
	python3 - "$@" <<-'EOF'
		import json, os, struct, sys
		n = int(sys.argv[2]) << 20
		hdr = json.dumps({"w": {"dtype": "U8", "shape": [n], "data_offsets": [0, n]},
		                  "__metadata__": {"format": "pt"}}).encode()
		with open(sys.argv[1], "wb") as f:
		    f.write(struct.pack("<Q", len(hdr)) + hdr)
		    if sys.argv[3:] == ["sparse"]:
		        f.truncate(8 + len(hdr) + n)
		    else:
		        f.write(os.urandom(n))
	EOF
}

run_w() {
	local expect=0
	case "$1" in [0-9]* | '?') expect=$1; shift ;; esac
	run_cmd "$expect" "$BIN/rekindle-weights" "$@"
}

# A process that maps a set file MAP_SHARED and holds it, serving on port
# 30000: /sum answers its pid and the sha256 of the bytes it maps; any
# other path answers 200 (the generic profile's quiesce and resume calls).
MAPPER='
import hashlib, http.server, json, mmap, os, sys
with open(sys.argv[1], "rb") as f:
    m = mmap.mmap(f.fileno(), 0, mmap.MAP_SHARED, mmap.PROT_READ)
class H(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        body = b"ok"
        if self.path == "/sum":
            body = json.dumps({"pid": os.getpid(), "sha256": hashlib.sha256(m).hexdigest()}).encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
    do_POST = do_GET
    def log_message(self, *a):
        pass
http.server.HTTPServer(("0.0.0.0", 30000), H).serve_forever()
'

# start_mapper NAME PORT SET FILE [nerdctl run flags...]
start_mapper() {
	local name=$1 port=$2 set=$3 file=$4
	shift 4
	run_nerdctl run -d --name "$name" -p "127.0.0.1:$port:30000" --device "rekindle.dev/weights=$set" "$@" \
		"$BASE_IMAGE" python3 -c "$MAPPER" "/rekindle/weights/$set/$file"
	wait_healthy "$port"
}

sum_of() { engine GET "$1" /sum | jq -r ".$2"; }

# A shell function, for the host and for a container's sh: set_files DIR
# prints each entry of DIR, sorted: name, size, mode, mtime (ns), SHA-256.
SET_FILES='set_files() {
	(cd "$1" && for f in $(ls -A | LC_ALL=C sort); do
		echo "$(stat -c "%n %s %a %.9Y" "$f") $(sha256sum <"$f" | cut -d" " -f1)"
	done)
}'
eval "$SET_FILES"

# What a container tries on set small: create a file, then write to, trim,
# touch, chmod, rename and remove the existing ones. Each attempt prints
# "refused: " or "WROTE: " and the command; set_files shows the set before
# and after.
WRITE_ATTEMPTS='
d=/rekindle/weights/small
try() { if "$@" 2>&1; then echo "WROTE: $*"; else echo "refused: $*"; fi; }
echo "== before"; set_files "$d"; echo "== tries"
try touch "$d/x"
try sh -c "echo x >>$d/model-2.safetensors"
try dd if=/dev/zero of="$d/model-1.safetensors" bs=4096 count=1 conv=notrunc status=none
try sh -c ": >$d/model-2.safetensors"
try truncate -s 4096 "$d/model-1.safetensors"
try touch "$d/model-2.safetensors"
try chmod 0666 "$d/model-1.safetensors"
try mv "$d/model-2.safetensors" "$d/renamed"
try rm -f "$d/rekindle-set.json"
echo "== after"; set_files "$d"; echo "== end"
'
WRITE_TRIES=9

# section NAME: the lines of $output between "== NAME" and the next "== ".
section() { awk -v s="== $1" '$0 == s {on = 1; next} /^== / {on = 0} on' <<<"$output"; }

src_sha() { sha256sum "$1" | cut -d' ' -f1; }

# snapshots: the containerd snapshots (to see none was left behind), but
# the checkpoint cache's, which an earlier test's image holds and garbage
# collection removes on its own time (a fresh-clone run saw one go
# mid-test).
snapshots() {
	"$BIN/ctr" --address "$RK_DIR/containerd.sock" -n default snapshots ls | tail -n +2 | grep -v '^checkpoint-cache/' | sort
}
# snapshots_quiet: the snapshots once no container's view is active any
# more (up to 10 s): an earlier test's `nerdctl run --rm` leaves one that
# garbage collection removes a moment later, and a list taken before that
# would not be seen again.
snapshots_quiet() {
	local now i
	for ((i = 0; i < 50; i++)); do
		now=$(snapshots)
		grep -qE ' Active[[:space:]]*$' <<<"$now" || break
		sleep 0.2
	done
	echo "$now"
}
# snapshots_settle BEFORE WHAT: no snapshot is there that BEFORE did not
# list. nerdctl run leaves a view of the image under a lease it ends on
# exit, which containerd's garbage collection removes a moment later; the
# same collection may take one of an earlier test's meanwhile (a fresh-clone
# run saw a committed one go), which is no leftover of this test's.
snapshots_settle() {
	local before=$1 what=$2 i added
	for ((i = 0; i < 50; i++)); do
		added=$(comm -13 <(echo "$before") <(snapshots))
		[ -z "$added" ] && return 0
		sleep 0.2
	done
	echo "#| before: $before" >&2
	die "$what: snapshots left: $added"
}

@test "load, list and status; a container reads the set read-only through CDI" {
	run_w list --json
	is "$(jq -r '.[] | select(.name == "small") | .state' <<<"$output")" "loaded" "state in list"
	run_w status --json small
	is "$(jq -r .bytes <<<"$output")" "$SMALL_BYTES" "bytes"
	is "$(jq -r .progress <<<"$output")" "$SMALL_BYTES" "progress of a loaded set"
	is "$(jq -r .loads <<<"$output")" "1" "load counter"
	is "$(jq -r '.manifest.files | map(.name) | join(" ")' <<<"$output")" "model-1.safetensors model-2.safetensors" "files"
	local dir=$WEIGHTS_DIR/root/sets/small
	is "$(stat -c '%a %U' "$dir" "$dir/model-1.safetensors" "$dir/rekindle-set.json" | tr '\n' ' ')" \
		"755 root 444 root 444 root " "modes and owner"
	is "$(stat -f -c %T "$WEIGHTS_DIR/root/sets")" "tmpfs" "sets live on a tmpfs"
	cmp "$SRC/small/model-1.safetensors" "$dir/model-1.safetensors" || die "loaded file differs from its source"
	jq -e '.kind == "rekindle.dev/weights" and (.devices | map(.name) | index("small") != null)' \
		"$WEIGHTS_DIR/cdi/rekindle-weights.json" >/dev/null || die "CDI spec lacks the set"

	# Read-only: every write is refused, and the set's files (as the
	# container and the host see them) are what they were, byte for byte,
	# size, mode and mtime, so a set that took a write and said it failed,
	# or said nothing, fails here too.
	local files
	files=$(set_files "$dir")
	is "$(wc -l <<<"$files")" "3" "entries in the set before the writes"
	run_nerdctl run --rm --net none --device rekindle.dev/weights=small "$BASE_IMAGE" \
		sh -c "$SET_FILES$WRITE_ATTEMPTS"
	is "$(section before)" "$files" "the set as the container sees it, before its writes"
	[[ $(section before) == *"model-2.safetensors "*" $(src_sha "$SRC/small/model-2.safetensors")"* ]] ||
		die "container read other bytes"
	[[ $output != *"WROTE: "* ]] || die "the set took writes in the container: $(grep 'WROTE: ' <<<"$output")"
	is "$(grep -c '^refused: ' <<<"$output")" "$WRITE_TRIES" "writes refused"
	[[ $output == *"Read-only file system"* ]] || die "the writes were not refused as writes to a read-only file system"
	is "$(section after)" "$files" "the set as the container sees it, after its writes"
	is "$(set_files "$dir")" "$files" "the set as the host sees it, after the container's writes"
}

@test "a checkpoint leaves the mapped set out; restore maps it again; evicted, the hook loads it on demand" {
	local port image=rekindle.local/ckpt:weights want
	want=$(src_sha "$SRC/small/model-1.safetensors")
	port=$(free_port)
	start_mapper wsrc "$port" small model-1.safetensors
	is "$(sum_of "$port" sha256)" "$want" "mapped bytes before the checkpoint"
	local pid0
	pid0=$(sum_of "$port" pid)
	run_w status --json small
	[ "$(jq '.mapped_by | length' <<<"$output")" -ge 1 ] || die "status shows no mapper"

	run_cmd "$BIN/oci-checkpoint" create --engine generic --port 30000 \
		--quiesce 'POST /quiesce' --resume 'POST /resume' wsrc "$image"
	run_nerdctl rm -f wsrc
	local layer
	layer=$("$BIN/oci-checkpoint" inspect --json "$image" | jq -r .layer_size)
	echo "# checkpoint layer $layer bytes, set $SMALL_BYTES bytes" >&3
	[ "$layer" -lt "$SMALL_BYTES" ] || die "checkpoint layer ($layer bytes) is as big as the set ($SMALL_BYTES): the set was dumped"

	port=$(free_port)
	run_nerdctl run -d --name wdst -p "127.0.0.1:$port:30000" --device rekindle.dev/weights=small "$image"
	wait_healthy "$port"
	is "$(sum_of "$port" pid)" "$pid0" "restored, not restarted"
	is "$(sum_of "$port" sha256)" "$want" "mapped bytes after restore"
	run_nerdctl rm -f wdst

	# Evicted: the restore's createRuntime hook loads it again.
	run_w evict small
	run_w status --json small
	is "$(jq -r .state <<<"$output")" "known" "state after evict"
	[ -z "$(ls "$WEIGHTS_DIR/root/sets/small")" ] || die "evict left files"
	port=$(free_port)
	run_nerdctl run -d --name wdst2 -p "127.0.0.1:$port:30000" --device rekindle.dev/weights=small "$image"
	wait_healthy "$port"
	is "$(sum_of "$port" pid)" "$pid0" "restored after an on-demand load"
	is "$(sum_of "$port" sha256)" "$want" "mapped bytes after an on-demand load"
	grep -q "weight set small was not loaded on this host; loading it from" "$RK_DIR/containerd.log" ||
		die "the hook's reason is not in containerd's log"
	run_w status --json small
	is "$(jq -r .state <<<"$output")" "loaded" "state after the hook"
	is "$(jq -r .loads <<<"$output")" "2" "load counter after the hook"

	# Mapped: evict is refused and names the process, --force is not.
	run_w 1 evict small
	[[ $output == *"is mapped by pid(s)"*"python3"*"--force"* ]] || die "evict of a mapped set not explained"
	is "$(sum_of "$port" sha256)" "$want" "mapping intact after the refused evict"
	run_nerdctl rm -f wdst2
}

@test "the service restarts while a container maps a set: mapping intact, set adopted" {
	local port want
	want=$(src_sha "$SRC/small/model-2.safetensors")
	run_w load small "$SRC/small"
	port=$(free_port)
	start_mapper wkeep "$port" small model-2.safetensors
	weights_stop
	is "$(sum_of "$port" sha256)" "$want" "mapping while the service is down"
	weights_start
	grep -q "set small: adopted" "$WEIGHTS_DIR/weights.log" || die "set not adopted from its manifest"
	run_w list
	[[ $output == *small*loaded* ]] || die "adopted set not listed as loaded"
	run_w status --json small
	is "$(jq -r .loads <<<"$output")" "0" "nothing read again after the restart"
	[ "$(jq '.mapped_by | length' <<<"$output")" -ge 1 ] || die "the container's mapping is not seen"
	is "$(sum_of "$port" sha256)" "$want" "mapping after the restart"
	run_nerdctl rm -f wkeep
}

@test "two concurrent loads of one set read it once" {
	# Large enough (256 MiB) that the second request meets the first load.
	gen_safetensors "$SRC/big/part-1.safetensors" 128
	gen_safetensors "$SRC/big/part-2.safetensors" 128
	sync
	echo 3 >/proc/sys/vm/drop_caches
	"$BIN/rekindle-weights" load big "$SRC/big" >"$BATS_TEST_TMPDIR/a" 2>&1 &
	local a=$!
	"$BIN/rekindle-weights" load big "$SRC/big" >"$BATS_TEST_TMPDIR/b" 2>&1 &
	local b=$!
	wait "$a" || die "first load failed: $(cat "$BATS_TEST_TMPDIR/a")"
	wait "$b" || die "second load failed: $(cat "$BATS_TEST_TMPDIR/b")"
	run_w status --json big
	is "$(jq -r .state <<<"$output")" "loaded" "state"
	is "$(jq -r .loads <<<"$output")" "1" "load counter"
	is "$(grep -c 'set big: loading ' "$WEIGHTS_DIR/weights.log")" "1" "loads in the service's log"
	grep -q "set big: already loading: this request waits" "$WEIGHTS_DIR/weights.log" ||
		die "the second request did not meet the first load (it came too late to test coalescing)"
	run_w forget big
	run_w 1 status big
}

@test "bad input: unknown set, not safetensors, truncated, over quota" {
	run_w 1 status nosuch
	[[ $output == *"weight set nosuch is not known on this host: load it with"* ]] || die "unknown set not explained"
	run_nerdctl 1 run --rm --net none --device rekindle.dev/weights=nosuch "$BASE_IMAGE" true
	[[ $output == *"rekindle.dev/weights=nosuch"* ]] || die "nerdctl does not name the unknown set"

	echo "not weights" >"$BATS_TEST_TMPDIR/notes.safetensors"
	run_w 1 load junk "$BATS_TEST_TMPDIR/notes.safetensors"
	[[ $output == *"notes.safetensors is not a valid safetensors file"* ]] || die "non-safetensors file not named"

	head -c 5000000 "$SRC/small/model-1.safetensors" >"$BATS_TEST_TMPDIR/cut.safetensors"
	run_w 1 load junk "$BATS_TEST_TMPDIR/cut.safetensors"
	[[ $output == *"cut.safetensors is not a valid safetensors file"*"truncated"* ]] || die "truncated file not explained"

	# small (48 MiB) is loaded; 2 x 200 MiB more passes the 400 MiB quota.
	run_w load small "$SRC/small"
	gen_safetensors "$BATS_TEST_TMPDIR/huge-1.safetensors" 200 sparse
	gen_safetensors "$BATS_TEST_TMPDIR/huge-2.safetensors" 200 sparse
	run_w 1 load junk "$BATS_TEST_TMPDIR"/huge-*.safetensors
	[[ $output == *"needs 400.0 MiB, 48.0 MiB of the 400.0 MiB quota is in use"*"--quota"* ]] || die "quota error does not name need, use and quota"

	run_w list --json
	is "$(jq -r 'map(.name) | index("junk")' <<<"$output")" "null" "failed loads left a set"
	[ ! -e "$WEIGHTS_DIR/root/sets/junk" ] || die "failed loads left a directory: $(ls -la "$WEIGHTS_DIR/root/sets/junk")"
}

@test "a container the allow list refuses is not created; an allowed one is" {
	run_w load --allow 'containerd:default/good-*' guarded "$SRC/small/model-2.safetensors"
	local before
	before=$(snapshots_quiet)
	run_nerdctl 1 run --rm --name bad-1 --net none --device rekindle.dev/weights=guarded "$BASE_IMAGE" true
	[[ $output == *"container bad-1 ("*") in containerd namespace default may not map weight set guarded (allowed: containerd:default/good-*)"*"--allow 'containerd:default/good-*' --allow containerd:default/bad-1 guarded"* ]] ||
		die "refusal does not name container, set and fix"
	run_nerdctl ps -a --format '{{.Names}}'
	! grep -qx bad-1 <<<"$output" || die "the refused container was left behind"
	snapshots_settle "$before" "snapshots after the refused container"

	# Without --rm, nerdctl keeps a failed container as Created with its
	# error (as for any failed start); runc left nothing: no task, no state.
	run_nerdctl 1 run -d --name bad-2 --net none --device rekindle.dev/weights=guarded "$BASE_IMAGE" sleep 60
	local id
	id=$("$REKINDLE_ROOT/scripts/nerdctl.sh" "$RK_DIR" inspect -f '{{.ID}}' bad-2)
	run_ctr task ls
	[[ $output != *"$id"* ]] || die "the refused container has a task"
	[ ! -e "$RK_DIR/runc/default/$id" ] || die "runc kept state for the refused container"
	run_nerdctl rm bad-2
	snapshots_settle "$before" "snapshots after removing it"

	run_nerdctl run --rm --net none --name good-1 --device rekindle.dev/weights=guarded "$BASE_IMAGE" \
		sha256sum /rekindle/weights/guarded/model-2.safetensors
	[[ $output == *"$(src_sha "$SRC/small/model-2.safetensors")"* ]] || die "allowed container read other bytes"

	# The old form, a bare name glob, is refused: a pod's author picks names.
	run_w 1 load --allow 'good-*' guarded
	[[ $output == *'bad allow entry "good-*": a bare container name is chosen by whoever writes the pod'*"k8s:NAMESPACE"* ]] ||
		die "a bare name glob was not refused"
	# A set loaded without --allow allows no container.
	run_w load closed "$SRC/small/model-2.safetensors"
	[[ $output == *"closed allows no container"* ]] || die "load does not say the set allows no container"
	run_nerdctl 1 run --rm --name good-2 --net none --device rekindle.dev/weights=closed "$BASE_IMAGE" true
	[[ $output == *"may not map weight set closed: the set allows no container"*"--allow containerd:default/good-2 closed"* ]] ||
		die "a set without --allow did not refuse"
	run_w forget closed
	run_w forget guarded
}

# The CRI part: pods as the kubelet makes them, through crictl, with the
# set's CDI device (CDI_devices) and a service account token volume.

# cri_ready: crictl pointed at this file's containerd, the base image and a
# sandbox image in k8s.io (as cri_up, on the stack already up), and the
# weights CDI spec where CRI reads specs (a copy: CRI's CDI dirs are the
# host's; the name is this run's, and teardown_file removes it).
cri_ready() {
	export CRICTL_CONFIG=$BATS_FILE_TMPDIR/crictl.yaml
	printf 'runtime-endpoint: unix://%s\nimage-endpoint: unix://%s\ntimeout: 120\n' "$RK_DIR/containerd.sock" "$RK_DIR/containerd.sock" >"$CRICTL_CONFIG"
	if [ ! -e "$BATS_FILE_TMPDIR/k8s-images" ]; then
		k8s_ctr images import "$IMAGES/base.tar" >/dev/null 2>&1 || die "cannot import base.tar into namespace k8s.io"
		local sandbox
		sandbox=$("$BIN/containerd" --config "$RK_DIR/config.toml" config dump 2>/dev/null |
			sed -n "s/^ *sandbox = ['\"]\(.*\)['\"]$/\1/p")
		[ -n "$sandbox" ] || die "no sandbox image in containerd's config dump"
		make_pause_image "$IMAGES/base.tar" "$sandbox" "$BATS_FILE_TMPDIR/pause.tar"
		k8s_ctr images import "$BATS_FILE_TMPDIR/pause.tar" >/dev/null 2>&1 || die "cannot import the sandbox image $sandbox"
		rm -f "$BATS_FILE_TMPDIR/pause.tar"
		touch "$BATS_FILE_TMPDIR/k8s-images"
	fi
	mkdir -p /var/run/cdi
	cp "$WEIGHTS_DIR/cdi/rekindle-weights.json" "$CRI_CDI_SPEC"
}

cri_exited() { [ "$(cri inspect "$1" 2>/dev/null | jq -r .status.state)" = CONTAINER_EXITED ]; }

b64url() { base64 -w0 | tr '+/' '-_' | tr -d '='; }

# sa_token DIR NAMESPACE POD_UID ACCOUNT: DIR/token, a bound service account
# token as the kubelet mounts it, signed with the file's key (RS256).
sa_token() {
	local hdr claims sig now
	now=$(date +%s)
	mkdir -p "$1"
	hdr=$(printf '{"alg":"RS256","kid":"k"}' | b64url)
	claims=$(jq -cn --arg ns "$2" --arg uid "$3" --arg sa "$4" --argjson now "$now" \
		'{iss: "https://kubernetes.default.svc", sub: "system:serviceaccount:\($ns):\($sa)", iat: $now, nbf: $now, exp: ($now + 3600),
		  "kubernetes.io": {namespace: $ns, pod: {name: "p", uid: $uid}, serviceaccount: {name: $sa, uid: "sa-uid"}}}' | b64url)
	sig=$(printf '%s.%s' "$hdr" "$claims" | openssl dgst -sha256 -sign "$BATS_FILE_TMPDIR/sa.key" -binary | b64url)
	printf '%s.%s.%s' "$hdr" "$claims" "$sig" >"$1/token"
}

# cri_pod NAMESPACE SET TOKEN_DIR: a pod in NAMESPACE (uid NAMESPACE-uid) whose
# container, named good-1, has set SET's device, the token volume and, as
# a pod author may write them, annotations that claim another identity;
# the container prints the set's file's SHA-256. Its create and start
# leave POD and CTR; the start's status and output are in $status, $output.
cri_pod() {
	local ns=$1 set=$2 tok=$3 pod=$BATS_TEST_TMPDIR/pod-$1.json ctr=$BATS_TEST_TMPDIR/ctr-$1.json
	local lies='{"io.kubernetes.cri.sandbox-namespace": "rekindle-prod", "io.kubernetes.cri.container-type": "", "nerdctl/name": "good-1"}'
	mkdir -p "$BATS_TEST_TMPDIR/logs-$ns"
	jq -n --arg ns "$ns" --arg logs "$BATS_TEST_TMPDIR/logs-$ns" --argjson lies "$lies" '{metadata: {name: "p", namespace: $ns, uid: ($ns + "-uid"), attempt: 0},
		log_directory: $logs, annotations: $lies, linux: {security_context: {namespace_options: {network: 2, pid: 1}}}}' >"$pod"
	jq -n --arg image "$BASE_IMAGE" --arg set "$set" --arg tok "$tok" --arg sadir /var/run/secrets/kubernetes.io/serviceaccount \
		--argjson lies "$lies" '{metadata: {name: "good-1"}, image: {image: $image}, annotations: $lies, log_path: "good-1.log",
		command: ["sha256sum", "/rekindle/weights/\($set)/model-2.safetensors"],
		mounts: [{container_path: $sadir, host_path: $tok, readonly: true}],
		CDI_devices: [{name: "rekindle.dev/weights=\($set)"}],
		linux: {security_context: {namespace_options: {network: 2, pid: 1}}}}' >"$ctr"
	cri_do runp "$pod"
	POD=$output
	cri_do create "$POD" "$ctr" "$pod"
	CTR=$output
	run cri start "$CTR"
}

@test "CRI: a pod is allowed by its namespace and verified service account, not by the names it chooses" {
	run_w load --allow 'k8s:rekindle-prod/engine' --allow 'containerd:*/good-*' pods "$SRC/small/model-2.safetensors"
	cri_ready
	local want
	want=$(src_sha "$SRC/small/model-2.safetensors")

	# Its container is named good-1 (as containerd:*/good-* allows), and its
	# annotations claim the allowed namespace: the pod is in rekindle-dev.
	sa_token "$BATS_TEST_TMPDIR/sa-dev" rekindle-dev rekindle-dev-uid engine
	cri_pod rekindle-dev pods "$BATS_TEST_TMPDIR/sa-dev"
	echo "$output" >&2
	[ "$status" -ne 0 ] || die "a pod in another namespace was started"
	[[ $output == *"container good-1 of pod rekindle-dev/p ("*", service account engine) may not map weight set pods (allowed: k8s:rekindle-prod/engine containerd:*/good-*)"*"--allow k8s:rekindle-dev/engine pods"* ]] ||
		die "the refusal does not name the pod as CRI vouches for it, the set and the fix"
	cri_do rmp -f "$POD"

	# The allowed namespace, another service account.
	sa_token "$BATS_TEST_TMPDIR/sa-prod-default" rekindle-prod rekindle-prod-uid default
	cri_pod rekindle-prod pods "$BATS_TEST_TMPDIR/sa-prod-default"
	echo "$output" >&2
	[ "$status" -ne 0 ] || die "a pod of another service account was started"
	[[ $output == *"of pod rekindle-prod/p ("*", service account default) may not map weight set pods"* ]] ||
		die "the refusal does not name the service account"
	cri_do rmp -f "$POD"

	# The allowed account's token, but another pod's (copied, or forged
	# with the right claims and no signature, is the same to the service).
	sa_token "$BATS_TEST_TMPDIR/sa-other-pod" rekindle-prod other-pod-uid engine
	cri_pod rekindle-prod pods "$BATS_TEST_TMPDIR/sa-other-pod"
	echo "$output" >&2
	[ "$status" -ne 0 ] || die "a pod with another pod's token was started"
	[[ $output == *"no verified service account (token at /var/run/secrets/kubernetes.io/serviceaccount is another pod's"* ]] ||
		die "another pod's token was not named as the reason"
	cri_do rmp -f "$POD"

	# The allowed namespace and account: it maps the set.
	sa_token "$BATS_TEST_TMPDIR/sa-prod" rekindle-prod rekindle-prod-uid engine
	cri_pod rekindle-prod pods "$BATS_TEST_TMPDIR/sa-prod"
	[ "$status" -eq 0 ] || die "the allowed pod did not start: $output"
	wait_for "the allowed pod's container to exit" 30 cri_exited "$CTR"
	run cri logs "$CTR"
	[[ $output == *"$want"* ]] || die "the allowed pod read other bytes: $output"
	cri_do rmp -f "$POD"
	rm -f "$CRI_CDI_SPEC"
	run_w forget pods
}

@test "a set adopted after its state file is lost keeps its allow list; one whose manifest keeps none refuses all" {
	run_w load --allow 'containerd:default/good-*' kept "$SRC/small/model-2.safetensors"
	jq -e '.allow == ["containerd:default/good-*"]' "$WEIGHTS_DIR/root/sets/kept/rekindle-set.json" >/dev/null ||
		die "the manifest does not keep the allow list: $(cat "$WEIGHTS_DIR/root/sets/kept/rekindle-set.json")"
	weights_stop
	rm "$WEIGHTS_DIR/state/sets.json"
	weights_start
	grep -q "set kept: adopted, .*allow \[\"containerd:default/good-\*\"\]" "$WEIGHTS_DIR/weights.log" || die "set not adopted with its allow list"
	run_w status --json kept
	is "$(jq -c '[.state, .allow_known, .allow]' <<<"$output")" '["loaded",true,["containerd:default/good-*"]]' "adopted set"
	run_nerdctl 1 run --rm --name bad-3 --net none --device rekindle.dev/weights=kept "$BASE_IMAGE" true
	[[ $output == *"container bad-3 ("*") in containerd namespace default may not map weight set kept (allowed: containerd:default/good-*)"* ]] ||
		die "the adopted set let another container in"
	run_nerdctl run --rm --name good-3 --net none --device rekindle.dev/weights=kept "$BASE_IMAGE" true

	# A manifest written before allow lists were kept there, and no state
	# file: the list is not known and every container is refused, with the fix.
	local m=$WEIGHTS_DIR/root/sets/kept/rekindle-set.json
	weights_stop
	jq 'del(.allow)' "$m" >"$BATS_TEST_TMPDIR/m.json"
	cat "$BATS_TEST_TMPDIR/m.json" >"$m"
	rm "$WEIGHTS_DIR/state/sets.json"
	weights_start
	run_w status kept
	[[ $output == *"allow:     not known: every container is refused"* ]] || die "status does not say the list is not known"
	run_nerdctl 1 run --rm --name good-4 --net none --device rekindle.dev/weights=kept "$BASE_IMAGE" true
	[[ $output == *"container good-4 ("*") in containerd namespace default may not map weight set kept: the set's allow list is not known"*"rekindle-weights load --allow ENTRY... kept', e.g. --allow containerd:default/good-4"* ]] ||
		die "a set with no known allow list did not refuse, or the refusal does not say why and how to fix it"
	run_w load --allow 'containerd:default/good-*' kept
	jq -e '.allow == ["containerd:default/good-*"]' "$m" >/dev/null || die "the manifest was not given the list"
	run_nerdctl run --rm --name good-4 --net none --device rekindle.dev/weights=kept "$BASE_IMAGE" true
	run_w forget kept
}

@test "only root may use the API: the socket is 0600 and other peers are refused" {
	is "$(stat -c %a "$REKINDLE_WEIGHTS_SOCKET")" "600" "socket mode"
	# Open the socket to everyone for a moment: the service itself must
	# refuse a peer whose SO_PEERCRED uid is not 0.
	chmod 0666 "$REKINDLE_WEIGHTS_SOCKET"
	run python3 - "$REKINDLE_WEIGHTS_SOCKET" <<-'EOF'
		import os, socket, sys
		os.chdir(os.path.dirname(sys.argv[1]))
		os.setgid(65534); os.setuid(65534)
		s = socket.socket(socket.AF_UNIX)
		s.connect(os.path.basename(sys.argv[1]))
		s.sendall(b"GET /v1/sets HTTP/1.0\r\nHost: x\r\n\r\n")
		print(s.makefile("rb").read().decode())
	EOF
	chmod 0600 "$REKINDLE_WEIGHTS_SOCKET"
	echo "$output" >&2
	[[ $output == *"403 Forbidden"*"serves root only and the caller runs as uid 65534"* ]] || die "a non-root peer was not refused"
}
