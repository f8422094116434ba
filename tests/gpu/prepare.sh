#!/usr/bin/env bash
# prepare.sh BUNDLE [CDI_LOG]: get a GPU machine ready for Rekindle from the
# bundle scripts/gpu-bundle.sh made: the stack unpacked in /opt/rekindle,
# CRIU's CUDA plugin where criu looks for it, io_uring off, and the CDI spec
# for nvidia.com/gpu. tests/gpu/run.sh and bench/gpu-bench.sh run it.
set -euo pipefail
. "$(dirname "$0")/../../scripts/lib.sh"
need_root
[ $# -ge 1 ] || die "usage: $0 BUNDLE [CDI_LOG]"
bundle=$1 cdilog=${2:-/dev/null}
opt=/opt/rekindle
mkdir -p "$opt/libexec"
tar -C "$opt" -xJf "$bundle" || die "cannot unpack $bundle into $opt"
# criu and jq need the Debian libraries packed beside them; only they get
# them, so the host's Python and PyTorch keep the host's own. They go under
# /usr/local, where a provisioned host has its CRIU: runc restores with CRIU
# in a mount namespace that holds /usr, PATH and little else of the host's.
lib=/usr/local/lib/rekindle libexec=/usr/local/libexec/rekindle
mkdir -p "$lib" "$libexec"
cp -a "$opt/lib/." "$lib/"
for t in criu criu-stock jq; do
	# The bundle's binary, unless an earlier run made this one a wrapper.
	head -c2 "$opt/bin/$t" | grep -q '#!' || mv -f "$opt/bin/$t" "$libexec/$t"
	printf '#!/bin/sh\nLD_LIBRARY_PATH=%s exec %s/%s "$@"\n' "$lib" "$libexec" "$t" >"$opt/bin/$t"
	chmod 0755 "$opt/bin/$t"
done
# criu was built with PREFIX=/usr/local: its plugins live there.
install -D -m 0644 "$opt/lib/criu/cuda_plugin.so" /usr/local/lib/criu/cuda_plugin.so
sysctl -qw kernel.io_uring_disabled=2 || note "warning: cannot disable io_uring"
# What vLLM needs of CRIU, in the file runc hands to every CRIU it runs (dump
# and restore alike): tcp-established for the loopback connection its
# EngineCore keeps to its own torch.distributed store, link-remap for the
# POSIX semaphore multiprocessing maps under a name it has since renamed.
# Both ends are in the frozen container, so no network lock is needed where
# the host has no iptables to take one.
mkdir -p /etc/criu
conf=/etc/criu/runc.conf
touch "$conf"
for o in tcp-established link-remap; do
	grep -qx "$o" "$conf" || echo "$o" >>"$conf"
done
# A multi-GPU engine's NCCL maps deleted /dev/shm files (34 MB each seen)
# that CRIU carries in the image only up to ghost-limit (1M by default); the
# same value as the Ansible role's containerd_criu_ghost_limit.
sed -i '/^ghost-limit\b/d' "$conf"
echo 'ghost-limit 64M' >>"$conf"
if ! command -v iptables-restore >/dev/null && ! grep -q '^network-lock' "$conf"; then
	echo 'network-lock skip' >>"$conf"
fi
mkdir -p /etc/cdi
PATH=$opt/bin:$PATH nvidia-ctk cdi generate --output=/etc/cdi/nvidia.yaml >"$cdilog" 2>&1 ||
	die "nvidia-ctk cdi generate failed (log: $cdilog)"
