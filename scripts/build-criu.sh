#!/usr/bin/env bash
# build-criu.sh VERSION DEB_VERSION SHA256 SRCDIR OUTDIR
# Fetch CRIU's orig tarball from Debian's sources (apt's own mirror, through a
# private apt state so the host's sources stay untouched), verify it against
# the pin, apply criu-patches/, and build criu and its CUDA plugin into
# OUTDIR/{bin,lib/criu}. With STOCK=1 the series is left out (benchmarks
# compare the two).
set -euo pipefail
. "$(dirname "$0")/lib.sh"
[ $# -eq 5 ] || die "usage: $0 VERSION DEB_VERSION SHA256 SRCDIR OUTDIR"
ver=$1 debver=$2 sha=$3 src=$4 out=$5
need_tool apt-get sha256sum make gcc protoc-c

tarball="criu_${ver}.orig.tar.xz"
dl=$(dirname "$src")/dl
fetch_orig criu "$debver" "$tarball" "$sha" "$dl"

rm -rf "$src"
mkdir -p "$src"
tar -xJf "$dl/$tarball" -C "$src" --strip-components=1
[ "${STOCK:-0}" = 1 ] || "$(dirname "$0")/apply-patches.sh" "$(dirname "$0")/../criu-patches" "$src" criu
note "building criu $ver"
make -C "$src" -j"$(nproc)" PREFIX="${PREFIX:-/usr/local}" PLUGINDIR="${PREFIX:-/usr/local}/lib/criu" criu >"$src/build.log" 2>&1 ||
	{ tail -20 "$src/build.log" >&2; die "criu build failed; full log: $src/build.log"; }
make -C "$src" -j"$(nproc)" PREFIX="${PREFIX:-/usr/local}" PLUGINDIR="${PREFIX:-/usr/local}/lib/criu" cuda_plugin >>"$src/build.log" 2>&1 ||
	{ tail -20 "$src/build.log" >&2; die "criu cuda_plugin build failed; full log: $src/build.log"; }
mkdir -p "$out/bin" "$out/lib/criu"
install -m 0755 "$src/criu/criu" "$out/bin/criu"
install -m 0644 "$src/plugins/cuda/cuda_plugin.so" "$out/lib/criu/cuda_plugin.so"
note "criu $("$out/bin/criu" --version | head -1)"
