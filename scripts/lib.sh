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

# apt_mirror: the Debian mirror this machine's apt already uses.
apt_mirror() {
	local uri
	uri=$(awk '/^URIs:/{print $2; exit}' /etc/apt/sources.list.d/*.sources 2>/dev/null || true)
	[ -n "$uri" ] || uri=$(awk '$1=="deb"{print $2; exit}' /etc/apt/sources.list 2>/dev/null || true)
	[ -n "$uri" ] || die "no Debian mirror found in /etc/apt: add one first"
	echo "$uri"
}

# private_apt STATEDIR TYPE SUITES: set up an apt state in STATEDIR that reads
# only the given suites from the machine's mirror, so the host's sources stay
# untouched, and set the array APT_OPTS to use it.
private_apt() {
	local state=$1 type=$2 suites=$3
	chmod 755 "$state"
	mkdir -p "$state/lists/partial"
	printf 'Types: %s\nURIs: %s\nSuites: %s\nComponents: main\nSigned-By: /usr/share/keyrings/debian-archive-keyring.gpg\n' \
		"$type" "$(apt_mirror)" "$suites" >"$state/sources"
	APT_OPTS=(-o APT::Sandbox::User=root -o "Dir::Etc::SourceList=$state/sources"
		-o Dir::Etc::SourceParts=- -o "Dir::State::Lists=$state/lists")
	apt-get "${APT_OPTS[@]}" update -qq || die "apt-get update of $suites from $(apt_mirror) failed"
}
