# shellcheck shell=bash disable=SC2154 # bench.sh's variables
# bench-pull.sh: bench.sh's BENCH_PULL=1 phase, sourced by it (its n, port,
# run_flags, drop_caches, bench_log and settings): a node that has nothing.
#
# A registry on loopback (Debian's docker-registry) gets the engine image; an
# engine started from that name is checkpointed and the image pushed, so the
# checkpoint names a base another node can pull. A second containerd root,
# empty, then pulls the checkpoint image (page cache dropped first) and
# restores it with nerdctl run, containerd pulling the base. Prints the
# result's "pull" object: the engine's cold start in this phase, the pull,
# the restore to its first answer and their sum against the cold start.

# shellcheck source=scripts/registry.sh
. "$root/scripts/registry.sh"

# pull_phase: run as a job of its own (set -e holds); stops what it started.
pull_phase() {
	local reg=$dir/registry fresh=$dir/fresh rport base img p t0 t1 t2 poller id said status restore
	need_tool docker-registry
	rport=$(port)
	registry_config "$reg" "$rport"
	docker-registry serve "$reg/config.yml" >"$reg/registry.log" 2>&1 &
	echo $! >"$reg/pid"
	# Expanded now: the locals are gone when the job exits.
	# shellcheck disable=SC2064
	trap "$(printf %q "$root/scripts/nerdctl.sh") $(printf %q "$dir") rm -f bench-pull-src >/dev/null 2>&1; kill $(cat "$reg/pid") 2>/dev/null; $(printf %q "$root/scripts/containerd-down.sh") $(printf %q "$fresh") >/dev/null 2>&1 || true" EXIT
	local up=
	for _ in $(seq 100); do
		registry_answers "$rport" 2>/dev/null && up=1 && break
		sleep 0.1
	done
	[ -n "$up" ] || die "docker-registry did not answer on 127.0.0.1:$rport within 10 s: $(tail -3 "$reg/registry.log")"
	base=127.0.0.1:$rport/rekindle/bench-engine:latest img=127.0.0.1:$rport/rekindle/bench-pull:latest
	n tag "$engine_image" "$base"
	n push --insecure-registry "$base" >"$reg/push.log" 2>&1 || die "nerdctl push $base failed: $(tail -2 "$reg/push.log")"

	drop_caches
	p=$gpu_port
	[ "$engine" = cpu ] && p=$(port)
	python3 "$root/bench/bench-poll.py" "$p" "$prompt" "$timeout" >"$dir/pull-cold.json" &
	poller=$!
	# shellcheck disable=SC2046
	n run -d --name bench-pull-src $(run_flags "$p") "${extra_flags[@]}" "${dev_flags[@]}" "${env_flags[@]}" "$base" >/dev/null ||
		die "nerdctl run $base failed"
	wait "$poller" || { n logs bench-pull-src 2>&1 | tail -20 >&2; die "pull phase, cold start: $(cat "$dir/pull-cold.json")"; }
	said=$(jq -c '[.text, .output_ids]' "$dir/pull-cold.json")
	# shellcheck disable=SC2086 # flags may quote calls: --quiesce 'GET /health'
	eval "ck_flags=(${BENCH_CHECKPOINT_FLAGS:-})"
	oci-checkpoint create --json "${ck_flags[@]}" bench-pull-src "$img" >"$dir/pull-checkpoint.json" ||
		die "oci-checkpoint create failed"
	n rm -f bench-pull-src >/dev/null
	n push --insecure-registry "$img" >"$reg/push.log" 2>&1 || die "nerdctl push $img failed: $(tail -2 "$reg/push.log")"

	CONTAINERD_TASK_STATE_TIMEOUT=$state_timeout "$root/scripts/containerd-up.sh" "$fresh" >/dev/null
	f() { "$root/scripts/nerdctl.sh" "$fresh" "$@"; }
	drop_caches
	t0=$EPOCHREALTIME
	f pull --insecure-registry "$img" >"$reg/pull.log" 2>&1 || die "nerdctl pull $img on the fresh root failed: $(tail -2 "$reg/pull.log")"
	t1=$EPOCHREALTIME
	python3 "$root/bench/bench-poll.py" "$p" "$prompt" "$timeout" >"$dir/pull-restore.json" &
	poller=$!
	t2=$EPOCHREALTIME
	# shellcheck disable=SC2046
	id=$(f run -d --name bench-pull-dst $(run_flags "$p") "${extra_flags[@]}" "${dev_flags[@]}" "${env_flags[@]}" "$img") ||
		{ kill "$poller" 2>/dev/null; die "nerdctl run $img on the fresh root failed"; }
	wait "$poller" || { f logs bench-pull-dst 2>&1 | tail -20 >&2; die "pull phase, restore: $(cat "$dir/pull-restore.json")"; }
	status=$(f exec bench-pull-dst cat /.rekindle/status) || die "no /.rekindle/status in the fresh root's restore"
	[ "$(jq -r .outcome <<<"$status")" = resumed ] || die "the fresh root's restore did not resume: $(jq -r .error <<<"$status")"
	[ "$(jq -c '[.text, .output_ids]' "$dir/pull-restore.json")" = "$said" ] ||
		die "the fresh root's restore answered $(jq -c '[.text, .output_ids]' "$dir/pull-restore.json"), the engine before the checkpoint $said"
	restore=$(bench_log restore "$fresh/containerd.log" "$id" 1) || die "cannot read the fresh root's containerd log"
	f rm -f bench-pull-dst >/dev/null
	jq -n --argjson t0 "$t0" --argjson t1 "$t1" --argjson t2 "$t2" --argjson restore "$restore" --argjson status "$status" \
		--slurpfile cold "$dir/pull-cold.json" --slurpfile rst "$dir/pull-restore.json" --slurpfile ck "$dir/pull-checkpoint.json" '
		($cold[0].t_answer - $cold[0].t_poll_start) as $c | ($t1 - $t0) as $pl | ($rst[0].t_answer - $t2) as $r |
		{image_bytes: $ck[0].size, cold_s: $c, pull_s: $pl, pull_gbps: (if $pl > 0 then $ck[0].size / $pl / 1e9 else null end),
		 restore_s: $r, total_s: ($pl + $r), ratio: (($pl + $r) / $c), target_ratio: 0.2,
		 containerd: $restore.containerd, cache: $restore.cache, resume_s: $status.resume_seconds}'
}
