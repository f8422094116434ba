#!/usr/bin/env bats
# oci-checkpoint's command line as nerdctl's and podman's: a usage error
# (unknown command or flag, a bad flag value, missing or extra arguments)
# exits 2 with the error and one usage line on stderr, nothing on stdout;
# every command's help has a description and an example. No containerd is
# needed: nothing here gets that far.

load helpers

setup_file() {
	need_built oci-checkpoint
}

# usage_error USAGE ARGS...: oci-checkpoint ARGS exits 2, prints nothing on
# stdout and, on stderr, an error line and then USAGE's line; the error
# line is left in $error_line.
usage_error() {
	local usage=$1
	shift
	echo "\$ oci-checkpoint $*" >&2
	run --separate-stderr "$BIN/oci-checkpoint" "$@"
	printf '%s\n' "$stderr" | sed 's/^/  /' >&2
	is "$status" 2 "exit status of oci-checkpoint $*"
	is "$output" "" "stdout of oci-checkpoint $*"
	is "${#stderr_lines[@]}" 2 "stderr lines of oci-checkpoint $*"
	is "${stderr_lines[0]}" "~^oci-checkpoint: error: " "the error line"
	is "${stderr_lines[1]}" "~^usage: $usage \(see '" "the usage line"
	error_line=${stderr_lines[0]}
}

@test "every usage error exits 2 with the error and one usage line on stderr" {
	local root='oci-checkpoint \[global flags\] COMMAND \[flags\] \[ARGS...\]'
	usage_error "$root" nosuch
	[[ $error_line == *'unknown command "nosuch"'* ]] || die "the unknown command is not named"
	usage_error "$root" help nosuch
	usage_error "$root" --bogus ls
	usage_error 'oci-checkpoint create \[flags\] CONTAINER IMAGE' create --bogus c i
	[[ $error_line == *"flag provided but not defined: --bogus"* ]] || die "the unknown flag is not named as typed"
	usage_error 'oci-checkpoint create \[flags\] CONTAINER IMAGE' create c
	[[ $error_line == *"missing IMAGE"* ]] || die "the missing argument is not named"
	usage_error 'oci-checkpoint create \[flags\] CONTAINER IMAGE' create --port abc c i
	usage_error 'oci-checkpoint inspect \[flags\] IMAGE' inspect a b
	usage_error 'oci-checkpoint inspect \[flags\] IMAGE' inspect a --json
	[[ $error_line == *"flags go before the arguments"* ]] || die "a flag after the arguments is not explained"
	usage_error 'oci-checkpoint check \[flags\] IMAGE' check
	usage_error 'oci-checkpoint memory \[flags\] IMAGE' memory
	usage_error 'oci-checkpoint ls \[flags\]' ls x
	usage_error 'oci-checkpoint rm \[flags\] IMAGE...' rm
	usage_error 'oci-checkpoint sign \[flags\] IMAGE' sign img
	[[ $error_line == *"--key FILE is required"* ]] || die "sign without --key is not explained"
}

@test "every command's help has a description and an example; --port and --sleep-level print one default" {
	local c example
	for c in create sign inspect check memory ls rm; do
		run_cmd "$BIN/oci-checkpoint" "$c" --help
		[[ $output == *$'\nDESCRIPTION:\n'* ]] || die "$c --help has no description"
		example="Examples?:"$'\n'" +oci-checkpoint $c[ "$'\n'"]"
		[[ $output =~ $example ]] || die "$c --help has no example"
	done
	run_cmd "$BIN/oci-checkpoint" create --help
	local line
	for line in "$(grep -E -- '^ +--port ' <<<"$output")" "$(grep -E -- '^ +--sleep-level ' <<<"$output")"; do
		is "$(grep -o '(default' <<<"$line" | wc -l)" 1 "defaults printed in: $line"
	done
}
