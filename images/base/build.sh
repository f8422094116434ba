#!/usr/bin/env bash
# build.sh OUT.tar: bootstrap Debian (minbase + ./packages) from this
# machine's apt mirror and write it as the OCI image archive OUT.tar,
# named rekindle.local/base:$BASE_SUITE. No image registry is needed.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
. "$here/../lib.sh"
[ $# -eq 1 ] || die "usage: $0 OUT.tar"
out=$(realpath -m "$1")
suite=${BASE_SUITE:-bookworm}
ref=${BASE_IMAGE_REF:-rekindle.local/base:$suite}
arch=$(dpkg --print-architecture)
need_root
need_pkgs debootstrap umoci debian-archive-keyring
need_tool debootstrap umoci python3 tar

mirror=${DEBIAN_MIRROR:-$(apt_mirror_uri)} ||
	die "no Debian mirror in /etc/apt/sources.list{,.d}: configure apt first, or set DEBIAN_MIRROR"
work=$(dirname "$out")/work/base
rootfs=$work/rootfs
cache=$(dirname "$out")/cache/debs-$suite-$arch

# debootstrap mounts proc/sys (and maybe more) inside the target; a failed
# run leaves them behind. Unmount whatever sits under the rootfs, deepest first.
umount_under() {
	local m
	for m in $(awk -v r="$1" '$2 == r || index($2, r "/") == 1 { print $2 }' /proc/mounts | sort -r); do
		umount "$m" 2>/dev/null || umount -l "$m" || true
	done
}
cleanup() { umount_under "$rootfs"; }
trap cleanup EXIT

umount_under "$rootfs"
rm -rf "$work"
mkdir -p "$work" "$cache"
pkgs=$(grep -v '^[[:space:]]*#' "$here/packages" | xargs | tr ' ' ,)
note "debootstrap $suite ($arch, minbase + $pkgs) from $mirror"
debootstrap --variant=minbase --arch="$arch" --include="$pkgs" --components=main \
	--keyring=/usr/share/keyrings/debian-archive-keyring.gpg --cache-dir="$cache" \
	"$suite" "$rootfs" "$mirror" >"$work/debootstrap.log" 2>&1 ||
	die "debootstrap failed (log: $work/debootstrap.log): $(tail -n3 "$work/debootstrap.log")"
umount_under "$rootfs"

# Trim what a container never needs; the runtime provides /dev, /proc, /sys,
# hostname and resolv.conf.
note "trimming rootfs"
rm -rf "$rootfs"/dev/* "$rootfs"/proc/* "$rootfs"/sys/* "$rootfs"/run/* "$rootfs"/tmp/* \
	"$rootfs"/var/cache/apt/* "$rootfs"/var/lib/apt/lists/* "$rootfs"/var/log/* \
	"$rootfs"/var/cache/debconf/*-old "$rootfs"/var/lib/dpkg/*-old \
	"$rootfs"/usr/share/doc/* "$rootfs"/usr/share/man/* "$rootfs"/usr/share/info/* \
	"$rootfs"/usr/share/locale/* "$rootfs"/var/cache/ldconfig/aux-cache
: >"$rootfs/etc/machine-id"
rm -f "$rootfs/etc/hostname" "$rootfs/etc/resolv.conf" "$rootfs/var/lib/dbus/machine-id"
# Keep apt usable inside the image for derived recipes, pointed at the same mirror.
echo "deb $mirror $suite main" >"$rootfs/etc/apt/sources.list"
chroot "$rootfs" /usr/bin/python3 -c 'import http.server, json, hashlib, threading' ||
	die "python3 in the bootstrapped rootfs is incomplete"

note "packing OCI image $ref"
layer_tar "$rootfs" "$work/layer.tar"
layout=$work/oci
created=$(image_created)
umoci init --layout "$layout"
umoci new --image "$layout:$suite"
umoci raw add-layer --image "$layout:$suite" --history.created "$created" \
	--history.created_by "debootstrap --variant=minbase --include=$pkgs $suite" "$work/layer.tar"
umoci config --image "$layout:$suite" --created "$created" --history.created "$created" \
	--history.created_by "rekindle images/base/build.sh" \
	--architecture "$arch" --os linux \
	--clear config.env --config.env "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin" \
	--config.env LANG=C.UTF-8 \
	--config.cmd /bin/bash \
	--config.label "org.opencontainers.image.title=rekindle base" \
	--config.label "org.opencontainers.image.description=Debian $suite minbase with python3, bootstrapped offline"
oci_pack "$layout" "$suite" "$ref" "$out"
rm -f "$work/layer.tar"
[ -n "${KEEP_ROOTFS:-}" ] || rm -rf "$rootfs"
note "wrote $out ($(du -h "$out" | cut -f1)) as $ref"
