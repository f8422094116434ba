# Shared shell helpers for the build scripts. Source, don't run.
die() { echo "rekindle: error: $*" >&2; exit 1; }
note() { echo "==> $*" >&2; }
need_root() { [ "$(id -u)" = 0 ] || die "must run as root (try: sudo $0 $*)"; }
need_tool() {
	local t
	for t in "$@"; do
		command -v "$t" >/dev/null 2>&1 || die "missing tool '$t': run 'make deps' (or install it) first"
	done
}
# pids_with STRING: pids of processes (other than this shell) whose command
# line contains STRING. The glob is expanded before any child starts, so the
# pipeline's own processes are never listed.
pids_with() {
	local p
	for p in /proc/[0-9]*; do
		[ "${p#/proc/}" = "$$" ] && continue
		{ tr '\0' ' ' <"$p/cmdline"; } 2>/dev/null | grep -qF -- "$1" && echo "${p#/proc/}"
	done
	return 0
}
