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
