#!/usr/bin/env bash
# apply-patches.sh PATCH_DIR SRC_DIR MODULE: apply the patch series listed in
# PATCH_DIR/series to a pristine source tree of Go module MODULE (the release
# pinned in versions.mk), e.g. containerd-patches/ to containerd. MODULE
# "criu" names CRIU's source tree instead (criu-patches/).
#
# All patches are applied to a scratch copy first; only when every one
# applies is the copy swapped in for SRC_DIR. So SRC_DIR ends up either fully
# patched or untouched. A tree this script already patched with the same
# series is left alone (stamp file .rekindle-patches).
set -euo pipefail
die() { echo "apply-patches.sh: $*" >&2; exit 1; }

[ $# -eq 3 ] || die "usage: $0 PATCH_DIR SRC_DIR MODULE"
here=$(realpath -e "$1" 2>/dev/null) || die "$1: no such directory"
src=$(realpath -e "$2" 2>/dev/null) || die "$2: no such directory"
module=$3
if [ "$module" = criu ]; then
	[ -f "$src/Makefile.versions" ] && grep -q '^CRIU_VERSION_MAJOR' "$src/Makefile.versions" ||
		die "$src is not a CRIU source tree (no Makefile.versions naming CRIU_VERSION_MAJOR)"
else
	[ -f "$src/go.mod" ] && grep -qxF "module $module" "$src/go.mod" ||
		die "$src is not a source tree of $module (its go.mod does not name it)"
fi
command -v patch >/dev/null || die "patch(1) is missing: apt-get install patch"

mapfile -t patches < <(sed -e 's/#.*//' -e 's/[[:space:]]*$//' -e '/^$/d' "$here/series")
[ ${#patches[@]} -gt 0 ] || die "$here/series lists no patches"
stamp=$(cd "$here" && cat series "${patches[@]}" | sha256sum | cut -d' ' -f1)

if [ -f "$src/.rekindle-patches" ]; then
	[ "$(cat "$src/.rekindle-patches")" = "$stamp" ] && { echo "apply-patches.sh: $src already has this series"; exit 0; }
	die "$src was patched with a different series: fetch a pristine tree and run again"
fi

work=$(mktemp -d "$(dirname "$src")/.apply-patches.XXXXXX")
trap 'chmod -R u+w "$work" 2>/dev/null; rm -rf "$work"' EXIT
cp -a "$src" "$work/tree"
chmod -R u+w "$work/tree"
for p in "${patches[@]}"; do
	[ -f "$here/$p" ] || die "series names $p, which is not in $here"
	# Each header says whether the patch is meant for upstream (DEP-3's
	# Forwarded:) and carries its author's sign-off.
	for field in Forwarded Signed-off-by; do
		sed '/^---$/q' "$here/$p" | grep -q "^$field: " ||
			die "$p has no $field: line in its header (see $here/README.md, series hygiene)"
	done
	if ! out=$(patch -d "$work/tree" -p1 --forward --no-backup-if-mismatch --reject-file=- < "$here/$p" 2>&1); then
		printf '%s\n' "$out" | grep -v '^patching file' >&2 || true
		die "$p does not apply to $src (hunks above); $src is untouched"
	fi
done
echo "$stamp" >"$work/tree/.rekindle-patches"

# Swap the patched copy in; both live in the same directory, so these are renames.
mv "$src" "$work/orig"
mv "$work/tree" "$src"
echo "apply-patches.sh: applied ${#patches[@]} patch(es) to $src: ${patches[*]}"
