#!/bin/bash
# test-patches.sh [-n] TESTS SRC BIN GO [ARG...]: run a patch series' own Go
# unit tests (make test-patches) in its patched tree SRC, one go test per line
# of TESTS (containerd-patches/tests, runc-patches/tests):
#
#   PACKAGE PATTERN [FLAGS]          # comment
#
# runs, in SRC, with GOFLAGS=-mod=mod:
#
#   GO test [ARG...] [-run 'PATTERN'] PACKAGE [FLAGS]
#
# PATTERN - gives no -run (the whole package). The FLAGS word +bin puts BIN
# first on PATH instead of going to go test. ARGs (e.g. -tags seccomp) go to
# every line. -n prints the commands instead of running them; stops at the
# first that fails.
set -euo pipefail

dry=
if [ "${1:-}" = -n ]; then
	dry=1
	shift
fi
if [ $# -lt 4 ]; then
	echo "usage: $0 [-n] TESTS SRC BIN GO [ARG...]" >&2
	exit 2
fi
tests=$1 src=$2 bin=$3 go=$4
shift 4
args=("$@")

n=0
while read -r pkg pattern flags; do
	pkg=${pkg%%#*}
	[ -n "$pkg" ] || continue
	flags=${flags%%#*}
	if [ -z "${pattern:-}" ] || [ "${pattern:0:1}" = "#" ]; then
		echo "$tests: '$pkg' has no PATTERN (- for the whole package)" >&2
		exit 2
	fi
	run=()
	[ "$pattern" = - ] || run=(-run "$pattern")
	env=()
	after=()
	for f in $flags; do
		case $f in
		+bin) env=("PATH=$bin:$PATH") ;;
		+*) echo "$tests: '$pkg': unknown flag $f" >&2; exit 2 ;;
		*) after+=("$f") ;;
		esac
	done
	cmd=(env ${env[@]+"${env[@]}"} GOFLAGS=-mod=mod "$go" test ${args[@]+"${args[@]}"} ${run[@]+"${run[@]}"} "$pkg" ${after[@]+"${after[@]}"})
	if [ -n "$dry" ]; then
		# As make -n printed the recipe lines this replaces.
		line="cd $src &&"
		[ ${#env[@]} -eq 0 ] || line+=" PATH=$bin:\$PATH"
		line+=" GOFLAGS=-mod=mod $go test"
		for a in ${args[@]+"${args[@]}"}; do line+=" $(printf %q "$a")"; done
		[ ${#run[@]} -eq 0 ] || line+=" -run '$pattern'"
		line+=" $pkg"
		for a in ${after[@]+"${after[@]}"}; do line+=" $a"; done
		echo "$line"
	else
		(cd "$src" && "${cmd[@]}")
	fi
	n=$((n + 1))
done < "$tests"
if [ "$n" -eq 0 ]; then
	echo "$tests: no tests" >&2
	exit 1
fi
