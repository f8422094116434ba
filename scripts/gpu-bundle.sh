#!/usr/bin/env bash
# gpu-bundle.sh OUT.tar.xz: pack what a GPU test run needs on a machine that
# has a GPU but no network and no build tools: the stack's binaries
# (stripped), CRIU's CUDA plugin, the shared libraries criu and jq need
# beyond glibc, bats, and the GPU image tarballs. tests/gpu/run.sh unpacks it.
# BUILDDIR (default build/) names the build folder to pack. GPU_BUNDLE_KUBE=1
# adds the single-node Kubernetes and NVIDIA's device plugin (make kubernetes
# device-plugin) as bin/kube, for 540-kubernetes-gpu.bats: about 100 MB more.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
. "$here/lib.sh"
[ $# -eq 1 ] || die "usage: $0 OUT.tar.xz"
root=$(dirname "$here")
b=${BUILDDIR:-$root/build}
out=$(realpath -m "$1")
stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT

mkdir -p "$stage/bin/cni" "$stage/lib/criu" "$stage/images"
for t in containerd containerd-shim-runc-v2 ctr runc criu nerdctl nvidia-ctk \
	nvidia-cdi-hook cuda-checkpoint oci-checkpoint rekindle-wake rekindle-weights mkfs.erofs crictl; do
	[ -x "$b/bin/$t" ] || die "$b/bin/$t is missing: run 'make build' first"
	cp "$b/bin/$t" "$stage/bin/"
done
cp "$b/bin/cni/"* "$stage/bin/cni/"
if [ "${GPU_BUNDLE_KUBE:-0}" = 1 ]; then
	mkdir -p "$stage/bin/kube"
	for t in etcd kube-apiserver kube-controller-manager kube-scheduler kubelet kubectl nvidia-device-plugin; do
		[ -x "$b/bin/kube/$t" ] || die "$b/bin/kube/$t is missing: run 'make kubernetes device-plugin' first"
		cp "$b/bin/kube/$t" "$stage/bin/kube/"
	done
fi
# A registry on loopback, for 510-vllm.bats's fresh node (Debian's, from make deps).
cp "$(command -v docker-registry)" "$stage/bin/" || die "docker-registry is missing: run 'make deps'"
# bench-criu.sh's parts: stock CRIU beside ours, and its two C tools, static
# (the GPU host may have no compiler).
[ -x "$b/stock/bin/criu" ] || die "$b/stock/bin/criu is missing: run 'make $b/stock/bin/criu' first"
cp "$b/stock/bin/criu" "$stage/bin/criu-stock"
gcc -O2 -static -o "$stage/bin/memstate" "$root/tests/criu/memstate.c" || die "cannot build memstate"
gcc -O2 -static -pthread -o "$stage/bin/pagefill" "$root/bench/pagefill.c" || die "cannot build pagefill"
cp "$(command -v jq)" "$stage/bin/"
strip "$stage/bin/"* "$stage/bin/cni/"* 2>/dev/null || true
cp "$b/lib/criu/cuda_plugin.so" "$stage/lib/criu/"

# Shared libraries outside glibc; the GPU host's glibc is as new or newer.
ldd "$stage/bin/criu" "$stage/bin/criu-stock" "$stage/bin/jq" "$stage/bin/runc" | awk '/=> \//{print $3}' | sort -u |
	grep -vE '/(libc|libm|libdl|libpthread|librt|ld-linux[^/]*)\.so' |
	while read -r l; do cp -L "$l" "$stage/lib/"; done

# bats-core, from its Debian package's files.
mkdir -p "$stage/bats/lib" "$stage/bats/libexec"
cp -r /usr/lib/bats-core "$stage/bats/lib/"
cp -r /usr/libexec/bats-core "$stage/bats/libexec/"
install -D -m 0755 /usr/bin/bats "$stage/bats/bin/bats"

for img in "$b"/images/gpu-*.tar "$b"/images/hf-*.tar "$b"/images/vllm-*.tar "$b"/images/sglang-*.tar; do
	[ -f "$img" ] && cp "$img" "$stage/images/"
done

mkdir -p "$(dirname "$out")"
tar -C "$stage" -cf - . | xz -T0 -9 >"$out.tmp"
mv "$out.tmp" "$out"
note "$(du -h "$out" | cut -f1) $out"
