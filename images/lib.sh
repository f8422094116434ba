# Shell helpers shared by the image recipes. Source, don't run.
# shellcheck shell=bash
. "$(dirname "${BASH_SOURCE[0]}")/../scripts/lib.sh"

# Fixed time stamp for files, layers and configs (bookworm's release day),
# so that rebuilding an unchanged recipe gives the same layer digests where
# the package contents allow it.
: "${SOURCE_DATE_EPOCH:=1686355200}"
export SOURCE_DATE_EPOCH
image_created() { date -u -d "@$SOURCE_DATE_EPOCH" +%Y-%m-%dT%H:%M:%SZ; }

# need_pkgs PKG...: install missing Debian packages (the recipes' build deps).
need_pkgs() {
	local p missing=()
	for p in "$@"; do
		dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
	done
	[ ${#missing[@]} -eq 0 ] && return 0
	need_root
	note "installing build deps: ${missing[*]}"
	DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends "${missing[@]}" ||
		die "apt-get could not install ${missing[*]}: run 'apt-get update' and retry"
}

# oci_pack LAYOUT TAG REF OUT: give the image LAYOUT:TAG the containerd
# image name REF (the annotation ctr import and nerdctl load read), drop
# unreferenced blobs, and write LAYOUT as an OCI image archive OUT.
oci_pack() {
	local layout=$1 tag=$2 ref=$3 out=$4
	umoci gc --layout "$layout" || die "umoci gc failed on $layout"
	python3 - "$layout/index.json" "$tag" "$ref" <<'PY' || die "cannot annotate $layout/index.json"
import json, sys
path, tag, ref = sys.argv[1:]
idx = json.load(open(path))
keep = [m for m in idx["manifests"]
        if m.get("annotations", {}).get("org.opencontainers.image.ref.name") == tag]
if len(keep) != 1:
    sys.exit(f"expected one manifest tagged {tag!r} in {path}, found {len(keep)}")
keep[0]["annotations"]["io.containerd.image.name"] = ref
idx["manifests"] = keep
json.dump(idx, open(path, "w"), separators=(",", ":"))
PY
	umoci gc --layout "$layout" || die "umoci gc failed on $layout"
	find "$layout" -exec touch -h -d "@$SOURCE_DATE_EPOCH" {} +
	mkdir -p "$(dirname "$out")"
	tar --sort=name --numeric-owner --owner=0 --group=0 --mtime="@$SOURCE_DATE_EPOCH" \
		-C "$layout" -cf "$out.tmp" oci-layout index.json blobs || die "cannot write $out"
	mv "$out.tmp" "$out"
}

# layer_tar DIR OUT: an uncompressed layer of DIR's contents, entries sorted,
# owners numeric, every mtime fixed. POSIX format keeps xattrs (file
# capabilities); its default extended headers carry atime, ctime and the pid,
# which would make every build differ, so leave them out.
layer_tar() {
	local dir=$1 out=$2
	(cd "$dir" && find . -mindepth 1 -maxdepth 1 -printf '%P\n' | LC_ALL=C sort) |
		tar --format=posix --pax-option='exthdr.name=%d/PaxHeaders/%f,delete=atime,delete=ctime' \
			--sort=name --numeric-owner --mtime="@$SOURCE_DATE_EPOCH" --xattrs \
			-C "$dir" -cf "$out" -T - || die "cannot tar $dir"
}
