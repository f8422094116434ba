#!/usr/bin/env bash
# ensure-go.sh VERSION: make sure a Go toolchain that can build with
# GOTOOLCHAIN=goVERSION is on this machine. Any Go >= 1.21 fetches the exact
# toolchain itself through the module proxy; with none, or an older one,
# install Go 1.23 from Debian's bookworm-backports first.
set -euo pipefail
. "$(dirname "$0")/lib.sh"
[ $# -eq 1 ] || die "usage: $0 GO_VERSION"
want=$1
backports=/usr/lib/go-1.23/bin

go_ok() { # a go >= 1.21 on PATH or in $backports
	local v
	v=$(PATH=$PATH:$backports GOTOOLCHAIN=local go env GOVERSION 2>/dev/null) || return 1
	v=${v#go}
	[ "$(printf '%s\n1.21\n' "${v%%[-+ ]*}" | sort -V | head -1)" = 1.21 ]
}
if ! go_ok; then
	need_root
	note "no Go >= 1.21 here: installing golang-1.23-go from bookworm-backports"
	state=$(mktemp -d)
	trap 'rm -rf "$state"' EXIT
	private_apt "$state" deb "bookworm bookworm-backports"
	DEBIAN_FRONTEND=noninteractive apt-get "${APT_OPTS[@]}" install -y -qq --no-install-recommends golang-1.23-go >/dev/null ||
		die "could not install golang-1.23-go; install Go >= 1.21 by hand and re-run"
	go_ok || die "Go is still missing after installing golang-1.23-go"
fi
PATH=$PATH:$backports GOTOOLCHAIN=go$want go version >/dev/null ||
	die "cannot fetch the go$want toolchain through the Go module proxy"
