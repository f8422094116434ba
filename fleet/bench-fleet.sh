#!/usr/bin/env bash
# bench-fleet.sh: N nodes restore one checkpoint image at once (make
# bench-fleet, docs/fleet.md). One origin registry, its egress limited to
# FLEET_RATE (tc), holds the CPU reference engine and a checkpoint of it,
# pushed once. For each N in FLEET_N (1 2 4 8) and each way of pulling
# (FLEET_MODES: direct, from the origin registry; kraken, through Kraken's
# agent on each node as containerd's mirror; kraken-preheated, the same with
# Kraken's origin made to fetch both images first, as a push through Kraken
# would: its time is reported apart), a fresh fleet (fleet/fleet.sh)
# has every node pull the engine's base image and nerdctl run the checkpoint
# at the same moment; each node's time is from that moment to the restored
# engine's first answer, which must be the answer the engine gave before the
# checkpoint. The origin's bytes come from the registry's access log.
#
# Prints one line per run and a table; writes FLEET_DIR/results.json.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
. "$root/scripts/lib.sh"
. "$root/fleet/fleet.sh"
need_root
need_tool jq python3 nsenter tc
bin=${REKINDLE_BIN:-$root/build/bin}
export REKINDLE_BIN=$bin
images=${REKINDLE_IMAGES:-$root/build/images}
dir=$(realpath -m "${FLEET_DIR:-/tmp/rk-fleet-bench}")
ns=${FLEET_N:-1 2 4 8}
modes=${FLEET_MODES:-direct kraken kraken-preheated}
timeout=${FLEET_TIMEOUT:-300}
prompt='{"text": "the quick brown fox", "max_new_tokens": 16}'
for t in nerdctl oci-checkpoint containerd; do
	[ -x "$bin/$t" ] || die "$bin/$t is missing: run 'make build' first"
done
[ -f "$images/cpu-engine.tar" ] || die "$images/cpu-engine.tar is missing: run 'make build' first"

reg=$(fleet_registry "$dir")
base=$reg/rekindle/fleet-engine:latest ckpt=$reg/rekindle/fleet-checkpoint:latest
src=$dir/src
cleanup() {
	fleet_down "$dir"
	"$root/scripts/containerd-down.sh" "$src" >/dev/null 2>&1 || true
}
trap cleanup EXIT
trap 'exit 130' INT TERM
cleanup
rm -rf "$dir" && mkdir -p "$dir"

# push_once: the engine, checkpointed on this host's own containerd, and
# its base image, into the origin registry (the only push of the bench).
push_once() {
	local p said
	CONTAINERD_RESTORE_IMAGES="[\"$reg\"]" "$root/scripts/containerd-up.sh" "$src" >/dev/null
	s() { "$root/scripts/nerdctl.sh" "$src" "$@"; }
	s load -i "$images/cpu-engine.tar" >/dev/null
	s tag rekindle.local/cpu-engine:latest "$base"
	s push --insecure-registry "$base" >"$dir/push.log" 2>&1 || die "nerdctl push $base failed: $(tail -2 "$dir/push.log")"
	p=$("$root/scripts/free-ports.py")
	s run -d --name fleet-src -p "127.0.0.1:$p:30000" "$base" >/dev/null
	python3 "$root/bench/bench-poll.py" "$p" "$prompt" 60 >"$dir/before.json" ||
		die "the engine did not answer before the checkpoint: $(cat "$dir/before.json")"
	CONTAINERD_ADDRESS=$src/containerd.sock PATH=$bin:$PATH oci-checkpoint create --quiet --json fleet-src "$ckpt" >"$dir/checkpoint.json" ||
		die "oci-checkpoint create failed"
	s rm -f fleet-src >/dev/null
	s push --insecure-registry "$ckpt" >"$dir/push.log" 2>&1 || die "nerdctl push $ckpt failed: $(tail -2 "$dir/push.log")"
	"$root/scripts/containerd-down.sh" "$src" >/dev/null
	said=$(jq -c '[.text, .output_ids]' "$dir/before.json")
	echo "$said" >"$dir/said"
}

# node_restore RUN I: node I pulls the base image and restores the
# checkpoint; writes RUN/nI.json (its answer and times).
node_restore() {
	local run=$1 i=$2 t0 t1 out=$1/n$i
	t0=$EPOCHREALTIME
	fleet_nerdctl "$run" "$i" pull --insecure-registry "$base" >"$out.pull.log" 2>&1 ||
		{ echo "{\"error\": \"pull of the base failed: $(tail -1 "$out.pull.log" | tr -d '"\\')\"}" >"$out.json"; return 1; }
	t1=$EPOCHREALTIME
	fleet_in "$run" "n$i" python3 "$root/bench/bench-poll.py" 30000 "$prompt" "$timeout" >"$out.poll.json" &
	local poller=$!
	fleet_nerdctl "$run" "$i" run -d --insecure-registry --name fleet-dst -p 127.0.0.1:30000:30000 "$ckpt" >"$out.run.log" 2>&1 ||
		{ kill "$poller" 2>/dev/null; echo "{\"error\": \"nerdctl run failed: $(tail -1 "$out.run.log" | tr -d '"\\')\"}" >"$out.json"; return 1; }
	wait "$poller" || { echo "{\"error\": $(jq -Rs . <"$out.poll.json")}" >"$out.json"; return 1; }
	jq -c --argjson t0 "$t0" --argjson t1 "$t1" '{pull_s: ($t1 - $t0), t0: $t0, t_answer, said: [.text, .output_ids]}' \
		"$out.poll.json" >"$out.json"
}

# one_run MODE N: a fresh fleet of N nodes restoring at once; prints its
# result as JSON.
one_run() {
	local mode=$1 n=$2 run=$dir i t0 fails=0 pids=()
	rm -rf "$dir"/n* "$dir/herd"
	: >"$dir/registry/access.log"
	local preheat_s=null t
	fleet_up "$dir" "$n" "${mode%-*}"
	if [ "$mode" = kraken-preheated ]; then
		t=$EPOCHREALTIME
		fleet_preheat "$dir" "$base" "$ckpt"
		preheat_s=$(python3 -c "print(round($EPOCHREALTIME - $t, 2))")
	fi
	sync
	echo 3 >/proc/sys/vm/drop_caches 2>/dev/null || true
	t0=$EPOCHREALTIME
	for ((i = 1; i <= n; i++)); do
		node_restore "$run" "$i" &
		pids+=($!)
	done
	for p in "${pids[@]}"; do wait "$p" || fails=$((fails + 1)); done
	local said served
	said=$(cat "$dir/said")
	served=$(fleet_served "$dir")
	python3 - "$mode" "$n" "$t0" "$served" "$said" "$dir" "$(fleet_blob_counts "$dir")" "$preheat_s" <<-'PY'
		import json, sys
		mode, n, t0, served, said, d, counts, preheat = sys.argv[1:]
		n, t0, served = int(n), float(t0), int(served)
		nodes = []
		for i in range(1, n + 1):
		    r = json.load(open(f"{d}/n{i}.json"))
		    if "error" in r:
		        nodes.append({"node": i, "error": r["error"]})
		        continue
		    same = json.dumps(r["said"], separators=(",", ":")) == said.strip()
		    nodes.append({"node": i, "seconds": round(r["t_answer"] - t0, 2), "pull_s": round(r["pull_s"], 2),
		                  "same_answer": same})
		print(json.dumps({"mode": mode, "n": n, "nodes": nodes, "origin_bytes": served,
		                  "blob_fetches": json.loads(counts), "preheat_s": json.loads(preheat)}))
	PY
	fleet_down "$dir"
}

# fleet_up DIR N MODE: fleet-up.sh's steps, keeping the registry's storage.
fleet_up() {
	fleet_net_up "$1" "$2"
	fleet_registry_up "$1"
	[ "$3" != kraken ] || fleet_herd_up "$1"
	for ((i = 1; i <= $2; i++)); do fleet_node_up "$1" "$i" "$3"; done
}

note "origin registry $reg, egress $FLEET_RATE; pushing the engine and its checkpoint once"
fleet_net_up "$dir" 1
fleet_registry_up "$dir"
push_once
fleet_down "$dir"
image_bytes=$(python3 - "$dir/registry" <<-'PY'
	import os, sys
	# Every blob the registry holds: the base image's and the checkpoint's.
	root = sys.argv[1] + "/docker/registry/v2/blobs"
	print(sum(os.path.getsize(os.path.join(d, f)) for d, _, fs in os.walk(root) for f in fs if f == "data"))
PY
)
note "the registry holds $image_bytes bytes (base image and checkpoint)"

results=()
for mode in $modes; do
	for n in $ns; do
		note "$mode, $n node(s) at once"
		r=$(one_run "$mode" "$n")
		echo "$r" | jq -c .
		results+=("$r")
	done
done
printf '%s\n' "${results[@]}" | jq -s --argjson image "$image_bytes" --arg rate "$FLEET_RATE" \
	'{rate: $rate, image_bytes: $image, runs: .}' >"$dir/results.json"
python3 "$root/fleet/bench-fleet-report.py" "$dir/results.json"
