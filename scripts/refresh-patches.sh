#!/usr/bin/env bash
# refresh-patches.sh containerd|runc|nerdctl|criu: rebuild a patch series in git
# format-patch form. The pinned release (versions.mk) is committed to a
# scratch git repository, the series is applied with `git am`, and the
# files are written again with `git format-patch --signoff`, numbered N/M,
# with a Signed-off-by from the patch author where one is missing; series
# is rewritten to match. Work on the series in that repository (rebase,
# amend) and run it again with KEEP=DIR to regenerate from DIR instead.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(dirname "$here")
. "$here/lib.sh"
[ $# -eq 1 ] || die "usage: $0 containerd|runc|nerdctl|criu"
need_tool git make
v() { make -s -C "$root" -f - print <<<"include versions.mk
print: ; @echo \$($1)"; }

name=$1 pdir=$root/$1-patches
[ -f "$pdir/series" ] || die "$pdir/series is missing"
repo=${KEEP:-$(mktemp -d "${TMPDIR:-/tmp}/refresh-$name.XXXXXX")}
if [ -z "${KEEP:-}" ]; then
	case "$name" in
	containerd) "$here/fetch-module.sh" "$(v CONTAINERD_MODULE)" "$(v CONTAINERD_VERSION)" "$(v CONTAINERD_SUM)" "$repo/src" ;;
	runc) "$here/fetch-module.sh" "$(v RUNC_MODULE)" "$(v RUNC_VERSION)" "$(v RUNC_SUM)" "$repo/src" ;;
	nerdctl) "$here/fetch-module.sh" "$(v NERDCTL_MODULE)" "$(v NERDCTL_VERSION)" "$(v NERDCTL_SUM)" "$repo/src" ;;
	criu)
		tarball=$root/build/src/dl/criu_$(v CRIU_VERSION).orig.tar.xz
		[ -f "$tarball" ] || die "$tarball is missing: run 'make build' first"
		mkdir -p "$repo/src" && tar -xJf "$tarball" -C "$repo/src" --strip-components=1
		;;
	*) die "unknown series '$name': containerd, runc, nerdctl or criu" ;;
	esac
	git -C "$repo/src" init -q
	git -C "$repo/src" add -A
	git -C "$repo/src" -c user.name=pristine -c user.email=pristine@localhost commit -qm "$name as pinned in versions.mk"
	mapfile -t patches < <(sed -e 's/#.*//' -e 's/[[:space:]]*$//' -e '/^$/d' "$pdir/series")
	for p in "${patches[@]}"; do
		git -C "$repo/src" -c user.name=Rekindle -c user.email=rekindle@localhost am -q --keep-cr "$pdir/$p" ||
			die "$p does not apply with git am (repository: $repo/src)"
	done
fi
src=$repo/src
n=$(git -C "$src" rev-list --count HEAD^{/"as pinned in versions.mk"}..HEAD)
[ "$n" -gt 0 ] || die "no patches on top of the pinned release in $src"

out=$(mktemp -d "$repo/out.XXXXXX")
# The Signed-off-by is the author's: every patch here is Rekindle's.
git -C "$src" -c user.name=Rekindle -c user.email=rekindle@localhost \
	format-patch -q --zero-commit --signoff --numbered -o "$out" "HEAD~$n"
header=$(grep '^#' "$pdir/series" || true)
rm -f "$pdir"/*.patch
mv "$out"/*.patch "$pdir/"
{ [ -n "$header" ] && echo "$header"; (cd "$pdir" && ls ./*.patch | sed 's|^\./||'); } >"$pdir/series"
note "$pdir: $n patch(es) regenerated from $src"
