#!/usr/bin/env bats
# The hostile-image fuzzer (tests/fuzz/fuzz-images.py) with a fixed seed:
# real dumps of busybox containers, their images mutated where CRIU reads
# names, sizes, counts, modes, tasks, namespaces and image files, in any
# field of any image file runc lets through, as raw bytes, in runc's
# descriptors.json and in references from one image into another (issue
# 57's pipe-key and lease holes among them), each restored by runc beside
# canaries. Every case must be refused with a reason or restore harmlessly,
# leave the canaries, hang nowhere, hand no restored task a host socket, an
# inherited descriptor past the stdio or a lease it could not take, and
# leave nothing behind. `make fuzz` runs it longer with a random seed.

load helpers

# Consecutive seeds take the mutation kinds in turn (24 of them), and the
# field kinds the image files of their group in turn from one round to the
# next: 192 cases try each kind 8 times, in 1 1/2 minutes on the 2-core dev
# VM (a restore takes under a second; one still running after 15 counts as a
# hang, and each costs 20 s with the kill: 2 1/2 minutes on a runc that
# hangs in the four pipe-key cases of this seed).
FUZZ_SEED=4750
FUZZ_CASES=192
FUZZ_TIMEOUT=15

setup_file() {
	need_built runc criu crit
	command -v busybox >/dev/null || skip "busybox is not installed (scripts/deps.sh installs busybox-static)"
}

@test "runc restore: seeded hostile mutations of real checkpoint images are refused or restore harmlessly, the host untouched" {
	run python3 "$REKINDLE_ROOT/tests/fuzz/fuzz-images.py" --seed "$FUZZ_SEED" --cases "$FUZZ_CASES" \
		--timeout "$FUZZ_TIMEOUT" --runc "$BIN/runc" --crit "$BIN/crit"
	# The summary table, whatever the outcome.
	sed -n '/^fuzz-images: [0-9]* cases/,$s/^/# /p' <<<"$output" >&3
	if [ "$status" -ne 0 ]; then
		grep -e ' -> FAIL' -e 'setup failed' -e 'stopped by a signal' <<<"$output" >&2 || printf '%s\n' "$output" >&2
		die "the fuzzer failed (exit $status); repeat a case with: make fuzz FUZZ_SEED=<seed> FUZZ_CASES=1 (its images are kept in build/fuzz-failed)"
	fi
}
