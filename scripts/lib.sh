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
# alive PID: PID is a process that runs: not gone, not a zombie (kill -0
# succeeds on a zombie, which serves nothing but lingers until its parent
# reaps it; a killed daemon whose parent never waits stays one).
alive() {
	[ -n "$1" ] && grep -q '^State:[[:space:]]*[^Z[:space:]]' "/proc/$1/status" 2>/dev/null
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

# apt_mirror_uri: the Debian mirror this machine's apt already uses (the first
# URIs: of a deb822 source whose Suites name a plain release, or the first
# "deb URI" line). We never write a mirror host into the repo.
apt_mirror_uri() {
	local f uri
	for f in /etc/apt/sources.list.d/*.sources; do
		[ -r "$f" ] || continue
		uri=$(awk '
			/^[[:space:]]*$/ { if (u != "" && plain) { print u; exit } u = ""; plain = 0; next }
			/^URIs:/ { u = $2 }
			/^Suites:/ { for (i = 2; i <= NF; i++) if ($i !~ /-/) plain = 1 }
			END { if (u != "" && plain) print u }' "$f" | head -n1)
		[ -n "$uri" ] && { echo "$uri"; return 0; }
	done
	for f in /etc/apt/sources.list /etc/apt/sources.list.d/*.list; do
		[ -r "$f" ] || continue
		uri=$(awk '$1 == "deb" && $2 !~ /^\[/ && $3 !~ /-/ { print $2; exit }
			$1 == "deb" && $2 ~ /^\[/ { for (i = 3; i <= NF; i++) if ($i !~ /\]$/ && $i ~ /:\/\//) { print $i; exit } }' "$f")
		[ -n "$uri" ] && { echo "$uri"; return 0; }
	done
	return 1
}

# apt_mirror: apt_mirror_uri, or stop saying there is none.
apt_mirror() {
	apt_mirror_uri || die "no Debian mirror found in /etc/apt: add one first"
}

# private_apt STATEDIR TYPE SUITES: set up an apt state in STATEDIR that reads
# only the given suites from the machine's mirror, so the host's sources stay
# untouched, and set the array APT_OPTS to use it.
private_apt() {
	local state=$1 type=$2 suites=$3
	chmod 755 "$state"
	mkdir -p "$state/lists/partial"
	# One-line format: apt reads a SourceList file as deb822 only when its
	# name ends in .sources, and the one-line form works on every release.
	local mirror s
	mirror=$(apt_mirror)
	for s in $suites; do
		echo "$type [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] $mirror $s main"
	done >"$state/sources.list"
	APT_OPTS=(-o APT::Sandbox::User=root -o "Dir::Etc::SourceList=$state/sources.list"
		-o Dir::Etc::SourceParts=- -o "Dir::State::Lists=$state/lists")
	apt-get "${APT_OPTS[@]}" update -qq || die "apt-get update of $suites from $mirror failed"
}

# fetch_orig PACKAGE DEB_VERSION TARBALL SHA256 DLDIR: put Debian's orig
# tarball of PACKAGE=DEB_VERSION (from sid or trixie sources, through a
# private apt state) in DLDIR, unless a copy matching SHA256 is there; stop
# on a checksum mismatch.
fetch_orig() (
	local pkg=$1 debver=$2 tarball=$3 sha=$4 dl=$5 state
	mkdir -p "$dl"
	echo "$sha  $dl/$tarball" | sha256sum -c --status 2>/dev/null && exit 0
	state=$(mktemp -d)
	trap 'rm -rf "$state"' EXIT
	private_apt "$state" deb-src "sid trixie"
	note "fetching $pkg $debver source from $(apt_mirror)"
	(cd "$state" && apt-get "${APT_OPTS[@]}" source --download-only --tar-only -qq "$pkg=$debver") ||
		die "$pkg $debver is not in Debian's sid/trixie sources any more: pick another in versions.mk"
	echo "$sha  $state/$tarball" | sha256sum -c --status ||
		die "checksum mismatch for $tarball: expected $sha (versions.mk), got $(sha256sum "$state/$tarball" | cut -d' ' -f1)"
	mv "$state/$tarball" "$dl/$tarball"
)
