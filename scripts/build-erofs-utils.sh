#!/usr/bin/env bash
# build-erofs-utils.sh VERSION DEB_VERSION SHA256 SRCDIR OUTDIR
# Fetch erofs-utils' orig tarball from Debian's sources (as build-criu.sh
# does), verify it against the pin and build a static mkfs.erofs into
# OUTDIR/bin. The restore reads a checkpoint layer in place through an EROFS
# tar index (mkfs.erofs --tar=i, erofs-utils 1.7 or later); Debian 12 ships
# 1.5. Built without compressors, FUSE or SELinux: a tar index needs none.
set -euo pipefail
. "$(dirname "$0")/lib.sh"
[ $# -eq 5 ] || die "usage: $0 VERSION DEB_VERSION SHA256 SRCDIR OUTDIR"
ver=$1 debver=$2 sha=$3 src=$4 out=$5
need_tool apt-get sha256sum make gcc autoreconf

tarball="erofs-utils_${ver}.orig.tar.gz"
dl=$(dirname "$src")/dl
fetch_orig erofs-utils "$debver" "$tarball" "$sha" "$dl"

rm -rf "$src"
mkdir -p "$src"
tar -xzf "$dl/$tarball" -C "$src" --strip-components=1
note "building mkfs.erofs $ver"
(
	cd "$src"
	[ -x configure ] || ./autogen.sh
	./configure --disable-lz4 --disable-lzma --without-zlib --without-libdeflate --without-libzstd \
		--without-uuid --without-selinux --disable-fuse LDFLAGS=-static
	make -j"$(nproc)" -C lib && make -j"$(nproc)" -C mkfs
) >"$src/build.log" 2>&1 || { tail -20 "$src/build.log" >&2; die "erofs-utils build failed; full log: $src/build.log"; }
mkdir -p "$out/bin"
install -m 0755 "$src/mkfs/mkfs.erofs" "$out/bin/mkfs.erofs"
"$out/bin/mkfs.erofs" --help 2>&1 | grep -q -- '--tar=' || die "the built mkfs.erofs has no --tar option"
note "$("$out/bin/mkfs.erofs" --version 2>&1 | head -1)"
