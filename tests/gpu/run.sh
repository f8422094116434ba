#!/usr/bin/env bash
# run.sh BUNDLE: on a GPU machine without network or build tools, unpack the
# bundle made by scripts/gpu-bundle.sh, prepare the host (CRIU plugin, CDI
# spec, io_uring off) and run the GPU system tests plus the stack's own.
# Logs go to $OUT (or ./gpu-out) so they can be brought back.
set -uo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
bundle=${1:?usage: $0 BUNDLE.tar.xz}
out=${OUT:-$root/gpu-out}
opt=/opt/rekindle
mkdir -p "$out" "$opt"
exec > >(tee "$out/run.log") 2>&1

echo "== host"
nvidia-smi --query-gpu=index,name,uuid,driver_version,memory.total --format=csv
uname -r
tar -C "$opt" -xJf "$bundle" || exit 1
export PATH=$opt/bin:$opt/bats/bin:$PATH LD_LIBRARY_PATH=$opt/lib REKINDLE_BIN=$opt/bin
# criu was built with PREFIX=/usr/local: its plugins live there.
install -D -m 0644 "$opt/lib/criu/cuda_plugin.so" /usr/local/lib/criu/cuda_plugin.so
sysctl -qw kernel.io_uring_disabled=2 || echo "warning: cannot disable io_uring"
mkdir -p /etc/cdi
nvidia-ctk cdi generate --output=/etc/cdi/nvidia.yaml >"$out/cdi.log" 2>&1 || { tail "$out/cdi.log"; exit 1; }
nvidia-ctk cdi list
criu check || echo "warning: criu check failed"

export REKINDLE_BATS_FILES=${REKINDLE_BATS_FILES:-tests/bats/500-gpu.bats}
"$root/tests/run.sh"
rc=$?
# containerd logs of each test file, for the record.
find /tmp/rekindle-test -name containerd.log -size -8M -exec sh -c 'cat "$1" >> "$2"' _ {} "$out/containerd.log" \; 2>/dev/null
exit $rc
