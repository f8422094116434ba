#!/usr/bin/env bash
# fetch-module.sh MODULE VERSION SUM DEST
# Download a Go module by exact version through the configured proxy, check
# its h1: hash against our pin, and copy its source tree to DEST (writable,
# without the zip's partial vendor/ so the build resolves modules itself).
set -euo pipefail
. "$(dirname "$0")/lib.sh"
[ $# -eq 4 ] || die "usage: $0 MODULE VERSION SUM DEST"
mod=$1 ver=$2 sum=$3 dest=$4
need_tool go jq

json=$(cd / && GOFLAGS=-mod=mod go mod download -json "$mod@$ver") ||
	die "cannot download $mod@$ver: $(echo "$json" | jq -r .Error 2>/dev/null)"
got=$(echo "$json" | jq -r .Sum)
[ "$got" = "$sum" ] || die "checksum mismatch for $mod@$ver: pinned $sum, got $got (versions.mk)"
dir=$(echo "$json" | jq -r .Dir)

rm -rf "$dest.tmp"
mkdir -p "$(dirname "$dest")"
cp -r "$dir" "$dest.tmp"
chmod -R u+w "$dest.tmp"
rm -rf "$dest.tmp/vendor"
rm -rf "$dest"
mv "$dest.tmp" "$dest"
note "fetched $mod@$ver ($sum)"
