#!/usr/bin/env bash
# apply.sh SRC_DIR: apply the patch series listed in `series` to a pristine
# containerd source tree (the release pinned in versions.mk).
#
# All patches are applied to a scratch copy first; only when every one
# applies is the copy swapped in for SRC_DIR. So SRC_DIR ends up either fully
# patched or untouched. A tree this script already patched with the same
# series is left alone (stamp file .rekindle-patches).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
die() { echo "apply.sh: $*" >&2; exit 1; }

[ $# -eq 1 ] || die "usage: $0 SRC_DIR"
src=$(realpath -e "$1" 2>/dev/null) || die "$1: no such directory"
[ -f "$src/go.mod" ] && grep -q '^module github.com/containerd/containerd/v2$' "$src/go.mod" ||
	die "$src is not a containerd v2 source tree (no go.mod for github.com/containerd/containerd/v2)"
command -v patch >/dev/null || die "patch(1) is missing: apt-get install patch"

mapfile -t patches < <(sed -e 's/#.*//' -e 's/[[:space:]]*$//' -e '/^$/d' "$here/series")
[ ${#patches[@]} -gt 0 ] || die "$here/series lists no patches"
stamp=$(cd "$here" && cat series "${patches[@]}" | sha256sum | cut -d' ' -f1)

if [ -f "$src/.rekindle-patches" ]; then
	[ "$(cat "$src/.rekindle-patches")" = "$stamp" ] && { echo "apply.sh: $src already has this series"; exit 0; }
	die "$src was patched with a different series: fetch a pristine tree and run again"
fi

work=$(mktemp -d "$(dirname "$src")/.apply-patches.XXXXXX")
trap 'chmod -R u+w "$work" 2>/dev/null; rm -rf "$work"' EXIT
cp -a "$src" "$work/tree"
chmod -R u+w "$work/tree"
for p in "${patches[@]}"; do
	[ -f "$here/$p" ] || die "series names $p, which is not in $here"
	if ! out=$(patch -d "$work/tree" -p1 --forward --no-backup-if-mismatch --reject-file=- < "$here/$p" 2>&1); then
		printf '%s\n' "$out" | grep -v '^patching file' >&2 || true
		die "$p does not apply to $src (hunks above); $src is untouched"
	fi
done
echo "$stamp" >"$work/tree/.rekindle-patches"

# Swap the patched copy in; both live in the same directory, so these are renames.
mv "$src" "$work/orig"
mv "$work/tree" "$src"
echo "apply.sh: applied ${#patches[@]} patch(es) to $src: ${patches[*]}"
