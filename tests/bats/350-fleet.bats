#!/usr/bin/env bats
# Many nodes, one image (docs/fleet.md): six nodes on this host, each a
# network namespace with its own containerd and Kraken agent, pull from one
# origin registry through their agents (containerd's mirror, hosts.toml in
# one config_path folder). The origin registry sends each blob once; a peer
# serving a corrupt piece is refused and the piece fetched elsewhere; an
# agent whose own cached copy is corrupt fetches it again; a peer that
# dies while it sends costs the pull nothing; a mirror that is down costs a pull nothing but one log line; a restore on a
# node without the checkpoint's base image pulls the base through the mirror;
# images that came through peers meet the restore policy and signatures as
# any; with the origin down, a node still restores what its peers have.

load helpers

setup_file() {
	need_built nerdctl oci-checkpoint
	[ -x "$BIN/kraken/agent" ] || skip "$BIN/kraken/agent is not built (run 'make kraken')"
	local t
	for t in /usr/sbin/nginx redis-server skopeo docker-registry nsenter tc; do
		command -v "$t" >/dev/null || skip "$t is not installed (make deps)"
	done
	export FLEET_DIR=$BATS_FILE_TMPDIR/fleet KRAKEN_BIN=$BIN/kraken
	# Kraken's origin seeds slowly, so that agents also take pieces from
	# each other.
	FLEET_ORIGIN_EGRESS=80000000 "$REKINDLE_ROOT/fleet/fleet-up.sh" "$FLEET_DIR" 6 kraken 3>&-
	root=$REKINDLE_ROOT
	. "$REKINDLE_ROOT/fleet/fleet.sh"
	export IMG
	IMG=$(fleet_registry "$FLEET_DIR")/rekindle/fleet-test:base
	skopeo copy --quiet --dest-tls-verify=false "oci-archive:$IMAGES/base.tar" "docker://$IMG" 3>&-
}

teardown_file() {
	[ -z "${FLEET_DIR:-}" ] || "$REKINDLE_ROOT/fleet/fleet-down.sh" "$FLEET_DIR" 3>&-
}

setup() {
	root=$REKINDLE_ROOT
	. "$REKINDLE_ROOT/fleet/fleet.sh"
}

# pull_on I: node I pulls IMG (through its hosts.toml); output in $output.
pull_on() {
	run_cmd fleet_nerdctl "$FLEET_DIR" "$1" pull -q "$IMG"
}

# manifest_of_img: IMG's manifest, from the origin registry.
manifest_of_img() {
	local reg=${IMG%%/*} repo=${IMG#*/}
	curl -fsS -H 'Accept: application/vnd.oci.image.manifest.v1+json' \
		"http://$reg/v2/${repo%:*}/manifests/${repo##*:}"
}

# blobs_of_img: the blob digests of IMG's manifest.
blobs_of_img() { manifest_of_img | jq -r '.config.digest, .layers[].digest'; }

# largest_layer: the digest of IMG's largest layer.
largest_layer() { manifest_of_img | jq -r '.layers | max_by(.size) | .digest'; }

# agent_copy I HEX: node I's agent's cached file of the blob sha256:HEX.
agent_copy() { find "$FLEET_DIR/n$1/agent/cache" -type f -path "*/$2/data"; }

# sent_to PART: the registry's full blob sends to PART's address.
sent_to() {
	local ip
	ip=$(fleet_ip "$FLEET_DIR" "$1")
	awk -v ip="$ip" '$1 == ip && $6 == "\"GET" && $9 == 200 && $7 ~ /\/blobs\//' "$FLEET_DIR/registry/access.log" | wc -l
}

@test "two nodes pull one image through their Kraken agents: the origin registry sends each blob once, to Kraken's origin" {
	pull_on 1
	pull_on 2
	local d counts
	counts=$(fleet_blob_counts "$FLEET_DIR")
	for d in $(blobs_of_img); do
		is "$(jq -r --arg d "$d" '.[$d] // 0' <<<"$counts")" 1 "times the origin registry sent $d for two nodes"
	done
	is "$(sent_to n1)" 0 "blobs the registry sent to node 1 itself"
	is "$(sent_to n2)" 0 "blobs the registry sent to node 2 itself"
	# Each node's containerd asked its own agent (the agent's nginx log).
	for d in 1 2; do
		grep -q "GET /v2/rekindle/fleet-test/blobs/" "$FLEET_DIR/n$d/agent/nginx-access.v2.log" ||
			die "node $d's agent served no blob: was its mirror used?"
	done
}

@test "a blob a peer serves corrupt is refused by its piece sums and fetched elsewhere; containerd gets it intact" {
	pull_on 1
	local big want f
	big=$(largest_layer)
	want=${big#sha256:}
	f=$(agent_copy 1 "$want")
	[ -f "$f" ] || die "node 1's agent has no cached copy of $big under $FLEET_DIR/n1/agent/cache"
	# A byte changed in every 4 MB piece, the file's size kept: node 1 now
	# seeds a corrupt copy. Node 2's good copy is taken out of the swarm.
	python3 - "$f" <<-'PY'
		import os, sys
		with open(sys.argv[1], "r+b") as f:
		    size = os.fstat(f.fileno()).st_size
		    for off in range(1000, size, 4 << 20):
		        f.seek(off); b = f.read(1); f.seek(off); f.write(bytes([b[0] ^ 0xff]))
	PY
	[ "$(sha256sum "$f" | cut -d' ' -f1)" != "$want" ] || die "the cached copy on node 1 is not corrupt"
	fleet_stop "$FLEET_DIR" n2/agent
	pull_on 3
	# The dispatcher logs to the agent's stdout (agent.out).
	# The dispatcher logs to the agent's stdout (agent.out); Kraken names a
	# peer by the SHA-1 of its IP:PORT (peer_id_factory addr_hash).
	local peer1
	peer1=$(printf '%s:16001' "$(fleet_ip "$FLEET_DIR" n1)" | sha1sum | cut -d' ' -f1)
	grep "invalid piece sum" "$FLEET_DIR/n3/agent.out" | grep -q "\"peer\": \"$peer1\"" ||
		die "node 3's agent never refused a piece from node 1 (peer $peer1): did node 1 serve it any? (see $FLEET_DIR/n3/agent.out)"
	local got
	got=$(fleet_in "$FLEET_DIR" n3 "$BIN/ctr" --address "$FLEET_DIR/n3/containerd.sock" -n default content get "$big" | sha256sum | cut -d' ' -f1)
	is "$got" "$want" "the SHA-256 of the layer in node 3's content store"
	local counts
	counts=$(fleet_blob_counts "$FLEET_DIR")
	is "$(jq -r --arg d "$big" '.[$d] // 0' <<<"$counts")" 1 "times the origin registry sent $big (the corrupt copy cost it nothing)"
}

@test "an agent whose cached copy of a blob is corrupt removes it and serves the blob intact, fetched again from the swarm" {
	local big want f before
	big=$(largest_layer)
	want=${big#sha256:}
	pull_on 1
	f=$(agent_copy 1 "$want")
	[ -f "$f" ] || die "node 1's agent has no cached copy of $big"
	# One byte changed, the size kept, as a disk fault leaves it (the
	# earlier test may have changed more).
	python3 - "$f" <<-'PY'
		import sys
		with open(sys.argv[1], "r+b") as f:
		    f.seek(4096); b = f.read(1); f.seek(4096); f.write(bytes([b[0] ^ 0xff]))
	PY
	[ "$(sha256sum "$f" | cut -d' ' -f1)" != "$want" ] || die "the cached copy on node 1 is not corrupt"
	# The image and the blob go from node 1's containerd, the blob's file
	# too (the collector takes it): the next pull fetches it again.
	local ctr=(fleet_in "$FLEET_DIR" n1 "$BIN/ctr" --address "$FLEET_DIR/n1/containerd.sock" -n default)
	run_cmd fleet_nerdctl "$FLEET_DIR" 1 rmi "$IMG"
	"${ctr[@]}" content rm "$big" >/dev/null 2>&1 || true
	wait_for "containerd's collector to remove $big from node 1's store" 30 \
		test ! -e "$FLEET_DIR/n1/root/io.containerd.content.v1.content/blobs/sha256/$want"
	before=$(fleet_blob_counts "$FLEET_DIR")

	# Fetch every blob (its layers are unpacked already).
	run_cmd fleet_nerdctl "$FLEET_DIR" 1 pull -q --unpack=false "$IMG"
	is "$("${ctr[@]}" content get "$big" | sha256sum | cut -d' ' -f1)" "$want" "the SHA-256 of the layer in node 1's content store"
	# The agent's own log (its config's log paths), not the dispatcher's.
	grep "Cached blob does not match its digest" "$FLEET_DIR/n1/agent/agent.log" | grep -q "$want" ||
		die "node 1's agent did not say it found its copy of $big corrupt (see $FLEET_DIR/n1/agent/agent.log)"
	f=$(agent_copy 1 "$want")
	is "$(sha256sum "$f" | cut -d' ' -f1)" "$want" "the SHA-256 of node 1's cached copy now"
	is "$(jq -r --arg d "$big" '.[$d] // 0' <<<"$(fleet_blob_counts "$FLEET_DIR")")" \
		"$(jq -r --arg d "$big" '.[$d] // 0' <<<"$before")" "times the origin registry sent $big again"
}

# tx_of PART: the bytes PART's end of the fleet's bridge has sent.
tx_of() { ip -n "$(fleet_ns "$FLEET_DIR" "$1")" -j -s link show eth0 | jq '.[0].stats64.tx.bytes'; }

@test "a peer that dies while it sends a blob costs the pull nothing: the rest comes from the swarm, intact, none of it from the origin registry again" {
	local big=${IMG%:*}:big layer want sent0 pid i
	# A layer no agent has yet: 48 MiB that do not compress.
	run_cmd fleet_nerdctl "$FLEET_DIR" 2 run --name big --network none "$IMG" \
		sh -c 'head -c 48M /dev/urandom >/big'
	run_cmd fleet_nerdctl "$FLEET_DIR" 2 commit big "$big"
	run_cmd fleet_nerdctl "$FLEET_DIR" 2 push -q "$big"
	fleet_nerdctl "$FLEET_DIR" 2 rm -f big >/dev/null
	# nerdctl commit makes a Docker schema 2 manifest.
	layer=$(curl -fsS -H 'Accept: application/vnd.docker.distribution.manifest.v2+json' \
		-H 'Accept: application/vnd.oci.image.manifest.v1+json' \
		"http://${IMG%%/*}/v2/rekindle/fleet-test/manifests/big" | jq -r '.layers | max_by(.size) | .digest')
	want=${layer#sha256:}
	# Node 1 has it; its agent seeds it, slowly enough to die mid-send.
	run_cmd fleet_nerdctl "$FLEET_DIR" 1 pull -q "$big"
	ip netns exec "$(fleet_ns "$FLEET_DIR" n1)" tc qdisc add dev eth0 root tbf rate 40mbit burst 64kb latency 500ms
	sent0=$(tx_of n1)
	fleet_nerdctl "$FLEET_DIR" 3 pull -q "$big" >"$BATS_TEST_TMPDIR/pull.out" 2>&1 &
	pid=$!
	for ((i = 0; i < 300; i++)); do
		[ $(($(tx_of n1) - sent0)) -lt $((8 << 20)) ] || break
		sleep 0.1
	done
	[ "$i" -lt 300 ] || die "node 1 sent node 3 under 8 MiB in 30 s: did node 3's agent take pieces from it?"
	kill -0 "$pid" 2>/dev/null || die "node 3's pull ended before node 1's agent died: slow node 1 further"
	local pgid
	pgid=$(awk '$1 == "pgid" && $3 == "n1/agent" {print $2}' "$FLEET_DIR/made" | tail -1)
	kill -KILL -- "-$pgid"
	local killed=$SECONDS sent=$((($(tx_of n1) - sent0) >> 20))
	wait "$pid" || die "node 3's pull failed once node 1's agent died: $(cat "$BATS_TEST_TMPDIR/pull.out")"
	echo "# node 1's agent killed after sending $sent MiB of 48; node 3's pull ended $((SECONDS - killed)) s later" >&3
	ip netns exec "$(fleet_ns "$FLEET_DIR" n1)" tc qdisc del dev eth0 root
	fleet_agent_up "$FLEET_DIR" 1
	local got
	got=$(fleet_in "$FLEET_DIR" n3 "$BIN/ctr" --address "$FLEET_DIR/n3/containerd.sock" -n default content get "$layer" | sha256sum | cut -d' ' -f1)
	is "$got" "$want" "the SHA-256 of the layer in node 3's content store"
	is "$(jq -r --arg d "$layer" '.[$d] // 0' <<<"$(fleet_blob_counts "$FLEET_DIR")")" 1 \
		"times the origin registry sent $layer (to Kraken's origin, for node 1)"
}

@test "a mirror that is down never fails a pull the origin registry can serve; the fallback is logged once, naming the mirror" {
	fleet_stop "$FLEET_DIR" n4/agent
	local before
	before=$(sent_to n4)
	run_cmd fleet_nerdctl "$FLEET_DIR" 4 pull -q "$IMG"
	local said
	said=$(grep -c 'trying next host' <<<"$output" || true)
	is "$said" 1 "lines in nerdctl's output that say it tries the next host"
	grep 'trying next host' <<<"$output" | grep -q 'host="127.0.0.1:16000"' ||
		die "the fallback line does not name the mirror 127.0.0.1:16000: $(grep 'trying next host' <<<"$output")"
	[ "$(sent_to n4)" -gt "$before" ] || die "the origin registry sent node 4 no blob: where did its pull come from?"
}

@test "containerd's registry config_path is one folder: two are refused, naming why" {
	run_cmd 2 env CONTAINERD_REGISTRY_CONFIG_PATH=/a/certs.d:/b/certs.d \
		"$REKINDLE_ROOT/scripts/containerd-config.sh" "$BATS_TEST_TMPDIR" "$BIN"
	is "$output" "~names more than one folder: give one" "the refusal"
	grep -q "config_path = \"$FLEET_DIR/n1/certs.d\"" "$FLEET_DIR/n1/config.toml" ||
		die "node 1's containerd config does not name its one certs.d folder"
}

# A server that answers every call with the time it started: the same
# answer after a restore, a new one after a cold start.
STARTED_AT='import http.server, time
t = repr(time.time()).encode()
class H(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(200)
        self.send_header("Content-Length", str(len(t)))
        self.end_headers()
        self.wfile.write(t)
    def log_message(self, *a):
        pass
http.server.HTTPServer(("127.0.0.1", 9000), H).serve_forever()'

# asked_on I [NAME]: what the server in container NAME (ck) on node I answers.
asked_on() {
	fleet_nerdctl "$FLEET_DIR" "$1" exec "${2:-ck}" python3 -c \
		'import urllib.request; print(urllib.request.urlopen("http://127.0.0.1:9000/").read().decode())'
}

# checkpoint_on I CONTAINER IMAGE [FLAGS...]: oci-checkpoint create on node
# I of the server in CONTAINER, as IMAGE.
checkpoint_on() {
	local i=$1 c=$2 image=$3
	shift 3
	run_cmd env CONTAINERD_ADDRESS="$FLEET_DIR/n$i/containerd.sock" PATH="$BIN:$PATH" oci-checkpoint create --quiet \
		--engine generic --port 9000 --health 'GET /' --quiesce 'GET /' --resume 'GET /' "$@" "$c" "$image"
}

# restart_node I [VAR=VALUE...]: node I's containerd started again as the
# fleet starts it, with VAR=VALUE besides (another restore policy).
restart_node() {
	local i=$1
	shift
	"$REKINDLE_ROOT/scripts/containerd-down.sh" "$FLEET_DIR/n$i" >/dev/null
	(
		export CONTAINERD_RESTORE_IMAGES="[\"${IMG%%/*}\"]" CONTAINERD_REGISTRY_CONFIG_PATH="$FLEET_DIR/n$i/certs.d"
		[ $# -eq 0 ] || export "$@"
		fleet_in "$FLEET_DIR" "n$i" "$REKINDLE_ROOT/scripts/containerd-up.sh" "$FLEET_DIR/n$i" >/dev/null
	)
}

# nothing_runs_on I NAME: no task of container NAME runs on node I, and the
# container is removed.
nothing_runs_on() {
	is "$(fleet_nerdctl "$FLEET_DIR" "$1" ps -q --filter "name=$2")" "" "containers named $2 running on node $1"
	fleet_nerdctl "$FLEET_DIR" "$1" rm -f "$2" >/dev/null 2>&1 || true
}

@test "a node without the base image restores a checkpoint: the restore's own pull of the base goes through its mirror, none of it from the origin" {
	local reg=${IMG%%/*} ck=${IMG%:*}:ckpt said
	pull_on 3
	run_cmd fleet_nerdctl "$FLEET_DIR" 3 run -d --name ck --network none "$IMG" python3 -c "$STARTED_AT"
	wait_for "the server on node 3" 15 asked_on 3
	said=$(asked_on 3)
	checkpoint_on 3 ck "$ck"
	run_cmd fleet_nerdctl "$FLEET_DIR" 3 push -q "$ck"

	local before
	before=$(sent_to n5)
	run_cmd fleet_nerdctl "$FLEET_DIR" 5 run -d --name ck --network none "$ck"
	wait_for "the restored server on node 5" 15 asked_on 5
	is "$(asked_on 5)" "$said" "the restored server's start time (a cold start answers another)"
	grep -q "base image $reg/rekindle/fleet-test:base.* is not in the local store: pulling" "$FLEET_DIR/n5/containerd.log" ||
		die "node 5's containerd did not pull the base image itself: was it in its store? (see $FLEET_DIR/n5/containerd.log)"
	local d
	for d in $(blobs_of_img); do
		grep -q "GET /v2/rekindle/fleet-test/blobs/$d" "$FLEET_DIR/n5/agent/nginx-access.v2.log" ||
			die "node 5's agent was not asked for the base image's blob $d: the pull went around the mirror"
	done
	is "$(sent_to n5)" "$before" "blobs the origin registry sent to node 5 itself"
}

@test "checkpoint images that came through the mirror meet the restore policy and signatures as any: refused outside the policy or unsigned, naming why; a signed one restores" {
	make_keys
	local unsigned=${IMG%:*}:unsigned signed=${IMG%:*}:signed said
	pull_on 3
	run_cmd fleet_nerdctl "$FLEET_DIR" 3 run -d --name sg --network none "$IMG" python3 -c "$STARTED_AT"
	wait_for "the server on node 3" 15 asked_on 3 sg
	said=$(asked_on 3 sg)
	checkpoint_on 3 sg "$unsigned" --leave-running
	checkpoint_on 3 sg "$signed" --sign-key "$KEYS/team.key"
	run_cmd fleet_nerdctl "$FLEET_DIR" 3 push -q "$unsigned"
	run_cmd fleet_nerdctl "$FLEET_DIR" 3 push -q "$signed"

	restart_node 6 CONTAINERD_RESTORE_IMAGES='["rekindle.local"]'
	run_cmd '?' fleet_nerdctl "$FLEET_DIR" 6 run -d --name sg --network none "$signed"
	[ "$status" -ne 0 ] || die "node 6 restored $signed, which its policy leaves out"
	refused_by_policy "$output" "${signed%:*}"
	nothing_runs_on 6 sg

	restart_node 6 CONTAINERD_RESTORE_KEYS="[\"$KEYS/team.pub\"]" CONTAINERD_RESTORE_REQUIRE_SIGNATURE=true
	run_cmd '?' fleet_nerdctl "$FLEET_DIR" 6 run -d --name sg --network none "$unsigned"
	[ "$status" -ne 0 ] || die "node 6 restored the unsigned $unsigned"
	refused_by_signature "$output" "$unsigned" "the image is not signed"
	nothing_runs_on 6 sg

	run_cmd fleet_nerdctl "$FLEET_DIR" 6 run -d --name sg --network none "$signed"
	wait_for "the restored server on node 6" 15 asked_on 6 sg
	is "$(asked_on 6 sg)" "$said" "the restored server's start time"
	grep -Eq "(HEAD|GET) /v2/rekindle/fleet-test/manifests/signed[ ?]" "$FLEET_DIR/n6/agent/nginx-access.v2.log" ||
		die "node 6's agent was not asked for $signed: where did it come from? (its last requests: $(tail -3 "$FLEET_DIR/n6/agent/nginx-access.v2.log"))"
	is "$(sent_to n6)" 0 "blobs the origin registry sent to node 6 itself"
}

@test "with the origin registry down, a node still restores a checkpoint image that its peers have" {
	local ck=${IMG%:*}:ckpt said
	[ -n "$(fleet_nerdctl "$FLEET_DIR" 5 ps -q --filter name=ck)" ] ||
		skip "needs node 5's restore of $ck, by the base-image test"
	said=$(asked_on 5)
	# The mirror test stopped node 4's agent.
	fleet_agent_up "$FLEET_DIR" 4
	fleet_stop "$FLEET_DIR" registry
	! curl -fsS -m 2 "http://${IMG%%/*}/v2/" >/dev/null 2>&1 || die "the origin registry still answers"
	run_cmd fleet_nerdctl "$FLEET_DIR" 4 run -d --name ck --network none "$ck"
	wait_for "the restored server on node 4" 15 asked_on 4
	is "$(asked_on 4)" "$said" "the restored server's start time"
}
