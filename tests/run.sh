#!/usr/bin/env bash
# Run every test: unit tests of our own code, then the bats system tests
# against a private containerd per test file. Prints one closing line,
# "N passed, N failed, N skipped", and exits non-zero on any failure.
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
. "$root/scripts/lib.sh"
need_root
cd "$root"

# Each bats file starts its containerd under this folder; a run that was
# killed leaves them behind, so stop those first.
export TMPDIR=${REKINDLE_TEST_ROOT:-/tmp/rekindle-test}
for d in "$TMPDIR"/bats-run-*/file/*/rk "$TMPDIR"/bats-run-*/suite/rk; do
	[ -d "$d" ] || continue
	note "cleaning up after an earlier, interrupted run: $d"
	scripts/kube-down.sh "$d"
	scripts/containerd-down.sh "$d"
done
rm -rf "$TMPDIR"
mkdir -p "$TMPDIR"

passed=0 failed=0 skipped=0
count() { # count NAME STATUS
	if [ "$2" -eq 0 ]; then passed=$((passed + 1)); else failed=$((failed + 1)); echo "FAILED: $1" >&2; fi
}

# Unit tests that each folder declares (Makefile fragments add to this list).
for t in ${REKINDLE_UNIT_TESTS:-}; do
	note "unit tests: $t"
	make --no-print-directory "$t"
	count "$t" $?
done

note "system tests (bats)"
files=${REKINDLE_BATS_FILES:-$(ls tests/bats/*.bats)}
log=$TMPDIR/bats.tap
bats --tap --print-output-on-failure ${REKINDLE_BATS_FLAGS:-} $files | tee "$log"
while read -r line; do
	case "$line" in
	"ok "*"# skip"*) skipped=$((skipped + 1)) ;;
	"ok "*) passed=$((passed + 1)) ;;
	"not ok "*) failed=$((failed + 1)) ;;
	esac
done <"$log"

# Nothing may outlive the run: no containerd, shim or mount of ours.
left=$(awk -v d="$TMPDIR/" 'index($5, d) == 1 {print $5}' /proc/self/mountinfo)
if [ -n "$left" ]; then
	echo "FAILED: mounts left behind: $left" >&2
	failed=$((failed + 1))
fi
stray=$(pids_with "$TMPDIR/")
if [ -n "$stray" ]; then
	echo "FAILED: processes left behind: $(ps -o pid=,args= -p "$(echo $stray | tr ' ' ,)")" >&2
	failed=$((failed + 1))
fi

echo "$passed passed, $failed failed, $skipped skipped"
[ "$failed" -eq 0 ]
