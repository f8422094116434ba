#!/usr/bin/env bash
# chaos.sh: the fault matrix (issue 61), longer than make test's fixed sets
# (tests/bats/48x-faults-*.bats). SIGKILL each of criu, runc, the runc
# shim, containerd and the nerdctl client at each phase of a `nerdctl run
# -d` restore of a CPU-engine checkpoint, and `oci-checkpoint create` at
# each of its phases; after each case check the host holds nothing of it
# and the same image answers the same. Prints one line per case and exits
# non-zero if any failed.
#
#   CHAOS_TARGETS  what to kill in restores (criu runc shim containerd nerdctl; "" for none)
#   CHAOS_PHASES   when (task-create criu-started memory-fill criu-done)
#   CHAOS_CREATE_PHASES  create's phases to kill it at ("" for none)
#   CHAOS_CASES    N: instead of the full matrix, N random restore cases
#   CHAOS_SEED     the seed of those (empty: random, printed)
#   CHAOS_GC=1     the cache GC prunes in a loop beside every restore
#   CHAOS_STATE_MB the create cases' engine state (512), for a longer dump
set -uo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
. "$root/scripts/lib.sh"
need_root
cd "$root"

targets=${CHAOS_TARGETS-criu runc shim containerd nerdctl}
phases=${CHAOS_PHASES:-task-create criu-started memory-fill criu-done}
create_phases=${CHAOS_CREATE_PHASES-health preflight quiesce inject-helper record dump package stop}

# CRIU does not run before it starts: that pair is no case.
cases=()
for t in $targets; do
	for p in $phases; do
		[ "$t@$p" != criu@task-create ] && cases+=("$t@$p")
	done
done
if [ -n "${CHAOS_CASES:-}" ]; then
	seed=${CHAOS_SEED:-$RANDOM}
	note "CHAOS_CASES=$CHAOS_CASES random restore cases, CHAOS_SEED=$seed"
	RANDOM=$seed
	picked=()
	for ((i = 0; i < CHAOS_CASES; i++)); do picked+=("${cases[RANDOM % ${#cases[@]}]}"); done
	cases=("${picked[@]}")
fi

# Its own folder under the test root: a killed run's stack is taken down
# first, as tests/run.sh does.
export TMPDIR=${REKINDLE_TEST_ROOT:-/tmp/rekindle-test}/chaos
for d in "$TMPDIR"/bats-run-*/file/*/rk; do
	[ -d "$d" ] || continue
	note "cleaning up after an earlier, interrupted run: $d"
	scripts/containerd-down.sh "$d"
done
rm -rf "$TMPDIR"
mkdir -p "$TMPDIR"
export CHAOS_RESULTS=$TMPDIR/results.tsv CHAOS_LOGS=$TMPDIR/logs
mkdir -p "$CHAOS_LOGS"
: >"$CHAOS_RESULTS"
export CHAOS_RESTORE="${cases[*]}" CHAOS_CREATE=$create_phases CHAOS_GC=${CHAOS_GC:-0}
note "restore cases: $CHAOS_RESTORE"
note "create cases (oci-checkpoint create killed at): $CHAOS_CREATE"

bats --tap ${CHAOS_BATS_FLAGS:-} tests/chaos/matrix.bats 2>&1 | tee "$TMPDIR/bats.tap"
brc=${PIPESTATUS[0]}

echo
printf '%-7s %-14s %-13s %-24s %-9s %-5s %s\n' KIND KILLED AT SEEN LEFTOVERS NEXT OUTCOME
failed=0
while IFS=$'\t' read -r kind killed phase seen outcome left next detail; do
	printf '%-7s %-14s %-13s %-24s %-9s %-5s %s\n' "$kind" "$killed" "$phase" "$seen" "$left" "$next" "$outcome"
	case "$left $next" in *FAIL*) failed=$((failed + 1)); echo "        $detail" ;; esac
done <"$CHAOS_RESULTS"
total=$(wc -l <"$CHAOS_RESULTS")

# Nothing may outlive the run: no process or mount of ours.
left=$(awk -v d="$TMPDIR/" 'index($5, d) == 1 {print $5}' /proc/self/mountinfo)
# A process may name the run only in its environment (nerdctl's port
# reserver, a logger).
stray=$(for p in /proc/[0-9]*; do
	[ "${p#/proc/}" != "$$" ] || continue
	{ tr '\0' ' ' <"$p/cmdline"; tr '\0' '\n' <"$p/environ"; } 2>/dev/null | grep -qF -- "$TMPDIR/" && echo "${p#/proc/}"
done)
[ -z "$left" ] || { echo "FAILED: mounts left behind: $left"; failed=$((failed + 1)); }
[ -z "$stray" ] || { echo "FAILED: processes left behind: $(ps -o pid=,args= -p "$(echo $stray | tr ' ' ,)")"; failed=$((failed + 1)); }
if [ "$brc" -ne 0 ]; then
	echo "the matrix's bats run failed ($TMPDIR/bats.tap):"
	grep -v '^# ' "$TMPDIR/bats.tap" | tail -20
	failed=$((failed + 1))
fi
echo "$total cases, $failed failed (outputs: $CHAOS_LOGS)"
[ "$failed" -eq 0 ]
