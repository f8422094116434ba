# shellcheck shell=bash
# fleet.sh: a fleet of nodes on one host, for fleet/bench-fleet.sh and the
# fleet tests (docs/fleet.md). Sourced; defines functions only; needs
# scripts/lib.sh's helpers and $root (the repository).
#
# Under DIR, one network namespace per part, joined by a bridge:
#
#   bridge   .1  the host: the checkpoint's source containerd
#   reg      .2  the origin registry (docker-registry :5000), its egress
#                limited with tc tbf to FLEET_RATE: a remote registry
#   herd     .3  Kraken's tracker (:15003, with Redis), origin (:15002,
#                peer :15001) and build-index (:15004)
#   n1..nN  .11+ a node: its own containerd (DIR/nI), and with Kraken its
#                agent, whose registry API (127.0.0.1:16000 in the node) is
#                the mirror of the origin registry in containerd's hosts.toml
#                (DIR/nI/certs.d, containerd's one config_path)
#
# The subnet 10.231.S.0/24 and the names (rkfXXXX...) come from a hash of
# DIR, so two fleets on one host do not meet. fleet_down DIR removes all of
# it, also after a killed run: what was made is listed in DIR/made.

FLEET_RATE=${FLEET_RATE:-200mbit}
FLEET_AGENT_PORT=16000
KRAKEN_BIN=${KRAKEN_BIN:-${REKINDLE_BIN:-$root/build/bin}/kraken}

# fleet_ids DIR: set F_ID (4 hex digits), F_NET (10.231.S) and F_BR.
fleet_ids() {
	local h
	h=$(realpath -m "$1" | sha256sum)
	F_ID=${h:0:4}
	F_NET=10.231.$((16#${h:4:2} % 200 + 20))
	F_BR=rkf$F_ID
}

# fleet_ns DIR PART: the network namespace of PART (reg, herd, n1...).
fleet_ns() { fleet_ids "$1"; echo "rkf$F_ID-$2"; }
# fleet_ip DIR PART: its address.
fleet_ip() {
	fleet_ids "$1"
	case $2 in
	host) echo "$F_NET.1" ;; reg) echo "$F_NET.2" ;; herd) echo "$F_NET.3" ;;
	n*) echo "$F_NET.$((10 + ${2#n}))" ;;
	*) die "fleet_ip: no part $2" ;;
	esac
}
# fleet_registry DIR: HOST:PORT of the origin registry, as image names give it.
fleet_registry() { echo "$(fleet_ip "$1" reg):5000"; }

# fleet_in DIR PART CMD...: run CMD in PART's network namespace (only that:
# mounts stay the host's, so containerd-down.sh finds a node's mounts).
fleet_in() {
	local dir=$1 part=$2
	shift 2
	nsenter --net="/run/netns/$(fleet_ns "$dir" "$part")" "$@"
}

# fleet_spawn DIR PART NAME LOG CMD...: start CMD detached in PART's network
# namespace, in a session of its own (DIR/made records it; fleet_down kills
# the session, nginx children too).
fleet_spawn() {
	local dir=$1 part=$2 name=$3 log=$4
	shift 4
	setsid nsenter --net="/run/netns/$(fleet_ns "$dir" "$part")" "$@" >>"$log" 2>&1 </dev/null &
	echo "pgid $! $name" >>"$dir/made"
}

# fleet_wait_port DIR PART ADDR PORT WHAT: wait until ADDR:PORT accepts
# connections in PART's namespace.
fleet_wait_port() {
	local i
	for ((i = 0; i < 150; i++)); do
		fleet_in "$1" "$2" bash -c "exec 3<>/dev/tcp/$3/$4" 2>/dev/null && return 0
		sleep 0.1
	done
	die "$5 did not listen on $3:$4 in 15 s: see its log under $1"
}

# fleet_net_up DIR N: the bridge, the registry's, the herd's and N nodes'
# namespaces, and the tc limit on the registry's egress.
fleet_net_up() {
	local dir=$1 n=$2 part ns ip i
	fleet_ids "$dir"
	mkdir -p "$dir"
	! ip link show "$F_BR" >/dev/null 2>&1 || die "bridge $F_BR of a fleet on $dir is still up: run fleet/fleet-down.sh $dir"
	ip link add "$F_BR" type bridge && echo "link $F_BR" >>"$dir/made"
	ip addr add "$F_NET.1/24" dev "$F_BR"
	ip link set "$F_BR" up
	local parts=(reg herd)
	for ((i = 1; i <= n; i++)); do parts+=("n$i"); done
	for part in "${parts[@]}"; do
		ns=rkf$F_ID-$part ip=$(fleet_ip "$dir" "$part")
		ip netns add "$ns" && echo "netns $ns" >>"$dir/made"
		ip link add "$ns" type veth peer name eth0 netns "$ns" && echo "link $ns" >>"$dir/made"
		ip link set "$ns" master "$F_BR" up
		ip -n "$ns" addr add "$ip/24" dev eth0
		ip -n "$ns" link set eth0 up
		ip -n "$ns" link set lo up
	done
	# A token bucket on what the registry sends: every byte a node or
	# Kraken's origin pulls from it passes here.
	ip netns exec "rkf$F_ID-reg" tc qdisc add dev eth0 root tbf rate "$FLEET_RATE" burst 256kb latency 500ms ||
		die "tc qdisc add ... tbf rate $FLEET_RATE failed: is FLEET_RATE a tc rate (e.g. 200mbit)?"
}

# fleet_registry_up DIR: the origin registry, storing under DIR/registry,
# logging every request with the bytes it sent (DIR/registry/access.log).
fleet_registry_up() {
	local dir=$1 reg=$1/registry
	need_tool docker-registry
	mkdir -p "$reg"
	cat >"$reg/config.yml" <<-EOF
		version: 0.1
		log:
		  level: warn
		storage:
		  filesystem:
		    rootdirectory: $reg
		  delete:
		    enabled: true
		http:
		  addr: 0.0.0.0:5000
	EOF
	fleet_spawn "$dir" reg registry "$reg/access.log" docker-registry serve "$reg/config.yml"
	fleet_wait_port "$dir" reg 127.0.0.1 5000 "the origin registry"
}

# fleet_served DIR: the bytes the origin registry sent for blobs and
# manifests so far, from its access log (combined format: status, bytes).
fleet_served() {
	awk '$6 == "\"GET" && $9 == 200 && $10 ~ /^[0-9]+$/ { b += $10 } END { print b + 0 }' "$1/registry/access.log"
}

# fleet_blob_fetches DIR DIGEST: how many times the registry sent blob DIGEST in full.
fleet_blob_fetches() {
	awk -v d="/blobs/$2" '$6 == "\"GET" && $9 == 200 && index($7, d) { n++ } END { print n + 0 }' "$1/registry/access.log"
}

# fleet_blob_counts DIR: {digest: times sent in full} of the registry's blobs, as JSON.
fleet_blob_counts() {
	awk '$6 == "\"GET" && $9 == 200 && match($7, /\/blobs\/sha256:[0-9a-f]+/) {
		n[substr($7, RSTART + 7, RLENGTH - 7)]++ }
		END { printf "{"; sep = ""; for (d in n) { printf "%s\"%s\": %d", sep, d, n[d]; sep = ", " } print "}" }' \
		"$1/registry/access.log"
}

# fleet_herd_config HERD_DIR HERD_IP REGISTRY NAME: the configuration of the
# herd's NAME (tracker, origin, build-index) from the kraken_herd role's own
# template (ansible/roles/kraken_herd), with the fleet's paths: the simulated
# fleet runs the files a provisioned herd gets. FLEET_ORIGIN_EGRESS (bits/s)
# limits what the origin seeds to agents, so that agents take pieces from
# each other (the tests).
fleet_herd_config() {
	local h=$1 ip=$2 reg=$3 name=$4
	python3 "$root/scripts/render-template.py" "$root/ansible/roles/kraken_herd/templates/$name.yaml.j2" "$(jq -cn \
		--arg h "$h" --arg ip "$ip" --arg reg "$reg" --argjson egress "${FLEET_ORIGIN_EGRESS:-0}" \
		'{ansible_role_name: "kraken_herd", kraken_herd_log_to_stdout: false, kraken_herd_log_dir: $h,
		kraken_herd_store_dir: $h, kraken_herd_registry: {host: $reg, scheme: "http"}, kraken_herd_ip: $ip,
		kraken_origin_port: 15002, kraken_build_index_port: 15004, kraken_herd_redis: "127.0.0.1:6379",
		kraken_tracker_announce_interval: "1s", kraken_origin_egress_bits_per_sec: $egress,
		kraken_tracker_socket: ($h + "/tracker.sock"), kraken_origin_socket: ($h + "/origin.sock"),
		kraken_build_index_socket: ($h + "/build-index.sock")}')"
}

# kraken_run DIR PART NAME CMD...: a Kraken component in PART's namespace.
# Each writes its nginx configuration to the fixed /tmp/nginx/NAME, which a
# mount namespace of its own makes its own (DIR/PART/NAME.nginx).
kraken_run() {
	local dir=$1 part=$2 name=$3 gen
	shift 3
	gen=$dir/$part/$name.nginx
	mkdir -p "$gen" /tmp/nginx
	fleet_spawn "$dir" "$part" "$part/$name" "$dir/$part/$name.out" \
		unshare -m --propagation private sh -c 'mount --bind "$0" /tmp/nginx && exec "$@"' "$gen" "$@"
}

# fleet_herd_up DIR: Redis, tracker, origin and build-index in the herd's
# namespace; the origin and build-index read blobs and tags from the origin
# registry (Kraken's registry backends).
fleet_herd_up() {
	local dir=$1 h=$1/herd reg ip t
	reg=$(fleet_registry "$dir") ip=$(fleet_ip "$dir" herd)
	for t in agent origin tracker build-index; do
		[ -x "$KRAKEN_BIN/$t" ] || die "$KRAKEN_BIN/$t is missing: run 'make kraken' first"
	done
	need_tool redis-server /usr/sbin/nginx
	mkdir -p "$h"
	fleet_spawn "$dir" herd herd/redis "$h/redis.log" \
		redis-server --port 6379 --bind 127.0.0.1 --save '' --appendonly no --dir "$h"
	for t in tracker origin build-index; do
		fleet_herd_config "$h" "$ip" "$reg" "$t" >"$h/$t.yaml"
	done
	rm -f "$h"/*.sock
	fleet_wait_port "$dir" herd 127.0.0.1 6379 "Redis"
	kraken_run "$dir" herd tracker "$KRAKEN_BIN/tracker" --config "$h/tracker.yaml" --port 15003
	kraken_run "$dir" herd origin "$KRAKEN_BIN/origin" --config "$h/origin.yaml" \
		--blobserver-hostname "$ip" --blobserver-port 15002 --peer-ip "$ip" --peer-port 15001
	kraken_run "$dir" herd build-index "$KRAKEN_BIN/build-index" --config "$h/build-index.yaml" --port 15004
	fleet_wait_port "$dir" herd "$ip" 15003 "Kraken's tracker"
	fleet_wait_port "$dir" herd "$ip" 15002 "Kraken's origin"
	fleet_wait_port "$dir" herd "$ip" 15004 "Kraken's build-index"
}

# fleet_preheat DIR REF...: have Kraken's origin fetch every blob of each
# image REF (its manifest, config and layers) from the origin registry now,
# as a push through Kraken would, so that no node waits for it: Kraken's
# origin starts the fetch at the first metainfo request and answers 202
# until it has the blob.
fleet_preheat() {
	local dir=$1 ref repo tag reg d url pending=() left i
	shift
	reg=$(fleet_registry "$dir")
	for ref in "$@"; do
		repo=${ref#*/} tag=${ref##*:}
		repo=${repo%:*}
		local accept="application/vnd.oci.image.manifest.v1+json, application/vnd.docker.distribution.manifest.v2+json"
		d=$(curl -fsS -I -H "Accept: $accept" "http://$reg/v2/$repo/manifests/$tag" |
			awk 'tolower($1) == "docker-content-digest:" {print $2}' | tr -d '\r')
		[ -n "$d" ] || die "the origin registry has no manifest for $ref"
		pending+=("$repo $d")
		for d in $(curl -fsS -H "Accept: $accept" "http://$reg/v2/$repo/manifests/$tag" | jq -r '.config.digest, .layers[].digest'); do
			pending+=("$repo $d")
		done
	done
	for ((i = 0; i < 600; i++)); do
		left=()
		for d in "${pending[@]}"; do
			set -- $d
			url="http://$(fleet_ip "$dir" herd):15002/internal/namespace/${1//\//%2F}/blobs/$2/metainfo"
			[ "$(curl -sS -o /dev/null -w '%{http_code}' "$url")" = 200 ] || left+=("$d")
		done
		[ ${#left[@]} -gt 0 ] || return 0
		pending=("${left[@]}")
		sleep 0.1
	done
	die "Kraken's origin did not have ${pending[*]} within 60 s: see $dir/herd/origin.log"
}

# fleet_agent_config AGENT_DIR HERD_IP: the agent's configuration from the
# kraken role's own template (ansible/roles/kraken), with the fleet's paths:
# the simulated fleet runs the file a provisioned node gets.
fleet_agent_config() {
	local a=$1 herd=$2
	python3 "$root/scripts/render-template.py" "$root/ansible/roles/kraken/templates/agent.yaml.j2" "$(jq -cn \
		--arg a "$a" --arg herd "$herd" '{ansible_role_name: "kraken", kraken_store_dir: $a,
		kraken_log_dir: $a, kraken_log_paths: [$a + "/agent.log"], kraken_registry_socket: ($a + "/registry.sock"),
		kraken_tracker_hosts: [$herd + ":15003"], kraken_build_index_hosts: [$herd + ":15004"]}')"
}

# fleet_agent_up DIR I: node I's Kraken agent, its registry API on
# 127.0.0.1:16000 in the node.
fleet_agent_up() {
	local dir=$1 part=n$2 a=$1/n$2/agent herd ip
	herd=$(fleet_ip "$dir" herd) ip=$(fleet_ip "$dir" "$part")
	mkdir -p "$a"
	fleet_agent_config "$a" "$herd" >"$a/agent.yaml.tmp"
	mv "$a/agent.yaml.tmp" "$a/agent.yaml"
	rm -f "$a/registry.sock"
	kraken_run "$dir" "$part" agent "$KRAKEN_BIN/agent" --config "$a/agent.yaml" \
		--peer-ip "$ip" --peer-port 16001 --agent-server-port 16002 --agent-registry-port "$FLEET_AGENT_PORT"
	fleet_wait_port "$dir" "$part" 127.0.0.1 "$FLEET_AGENT_PORT" "node $2's Kraken agent"
}

# fleet_hosts DIR I [MIRROR]: node I's hosts.toml for the origin registry:
# plain HTTP, and with MIRROR (HOST:PORT in the node) pulls through it first.
fleet_hosts() {
	local dir=$1 i=$2 mirror=${3:-} reg f
	reg=$(fleet_registry "$dir")
	f=$dir/n$i/certs.d/$reg/hosts.toml
	mkdir -p "$(dirname "$f")"
	{
		echo "server = \"http://$reg\""
		if [ -n "$mirror" ]; then
			printf '\n[host."http://%s"]\n  capabilities = ["pull", "resolve"]\n' "$mirror"
		fi
	} >"$f"
}

# fleet_node_up DIR I [kraken]: node I's containerd, which restores images
# from the origin registry, its hosts.toml, and with kraken its agent as the
# mirror.
fleet_node_up() {
	local dir=$1 i=$2 mode=${3:-} reg
	reg=$(fleet_registry "$dir")
	mkdir -p "$dir/n$i"
	if [ "$mode" = kraken ]; then
		fleet_agent_up "$dir" "$i"
		fleet_hosts "$dir" "$i" "127.0.0.1:$FLEET_AGENT_PORT"
	else
		fleet_hosts "$dir" "$i"
	fi
	echo "containerd $dir/n$i" >>"$dir/made"
	CONTAINERD_RESTORE_IMAGES="[\"$reg\"]" CONTAINERD_REGISTRY_CONFIG_PATH=$dir/n$i/certs.d \
		fleet_in "$dir" "n$i" "$root/scripts/containerd-up.sh" "$dir/n$i" >/dev/null
}

# fleet_nerdctl DIR I ARGS...: nerdctl on node I, reading its hosts.toml.
fleet_nerdctl() {
	local dir=$1 i=$2
	shift 2
	fleet_in "$dir" "n$i" "$root/scripts/nerdctl.sh" "$dir/n$i" --hosts-dir "$dir/n$i/certs.d" "$@"
}

# fleet_stop DIR NAME: stop the process DIR/made lists as NAME (n1/agent,
# herd/origin, ...) and its children.
fleet_stop() {
	local pgid
	pgid=$(awk -v n="$2" '$1 == "pgid" && $3 == n {print $2}' "$1/made" | tail -1)
	[ -n "$pgid" ] || die "fleet_stop: no $2 in $1/made"
	kill -TERM -- "-$pgid" 2>/dev/null || return 0
	for _ in $(seq 30); do kill -0 -- "-$pgid" 2>/dev/null || return 0; sleep 0.1; done
	kill -KILL -- "-$pgid" 2>/dev/null || true
}

# fleet_down DIR: stop and remove what DIR/made lists, newest first; never
# fails (what is gone already is skipped).
fleet_down() {
	local dir=$1 kind what name
	[ -f "$dir/made" ] || return 0
	tac "$dir/made" | while read -r kind what name; do
		case $kind in
		containerd) fleet_in "$dir" "${what##*/}" "$root/scripts/containerd-down.sh" "$what" >/dev/null 2>&1 ||
			"$root/scripts/containerd-down.sh" "$what" >/dev/null 2>&1 || true ;;
		pgid)
			kill -TERM -- "-$what" 2>/dev/null || continue
			for _ in $(seq 30); do kill -0 -- "-$what" 2>/dev/null || break; sleep 0.1; done
			kill -KILL -- "-$what" 2>/dev/null || true
			;;
		netns) ip netns del "$what" 2>/dev/null || true ;;
		link) ip link del "$what" 2>/dev/null || true ;;
		esac
	done
	rm -f "$dir/made"
}
