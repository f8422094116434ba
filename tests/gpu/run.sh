#!/usr/bin/env bash
# run.sh BUNDLE: on a GPU machine without network or build tools, unpack the
# bundle made by scripts/gpu-bundle.sh, prepare the host (CRIU plugin, CDI
# spec, io_uring off) and run the GPU system tests plus the stack's own.
# Logs go to $OUT (or ./gpu-out) so they can be brought back.
set -uo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
bundle=${1:?usage: $0 BUNDLE.tar.xz (or - : the host is prepared already, e.g. by an earlier run)}
out=${OUT:-$root/gpu-out}
opt=/opt/rekindle
mkdir -p "$out" "$opt"
exec > >(tee "$out/run.log") 2>&1

echo "== host"
nvidia-smi --query-gpu=index,name,uuid,driver_version,memory.total,persistence_mode --format=csv
uname -r
if [ "$bundle" != - ]; then
	"$root/tests/gpu/prepare.sh" "$bundle" "$out/cdi.log" || { tail "$out/cdi.log"; exit 1; }
fi
# runc keeps CRIU's dump.log and restore.log only until the shim cleans up:
# a wrapper copies them out, so a failed restore can be read afterwards.
criulogs=/tmp/rekindle-test-criu-logs
rm -rf "$criulogs" && mkdir -p "$criulogs"
[ -f "$opt/libexec/runc" ] || mv "$opt/bin/runc" "$opt/libexec/runc"
cat >"$opt/bin/runc" <<WRAPPER
#!/bin/sh
"$opt/libexec/runc" "\$@"
rc=\$?
w=; prev=
for a in "\$@"; do [ "\$prev" = --work-path ] && w=\$a; prev=\$a; done
for f in "\$w/restore.log" "\$w/dump.log"; do
	[ -n "\$w" ] && [ -f "\$f" ] && cp "\$f" "$criulogs/\$(date +%s.%N)-rc\$rc-\$(basename "\$f")"
done
exit \$rc
WRAPPER
chmod 0755 "$opt/bin/runc"
export PATH=$opt/bin:$opt/bats/bin:$PATH REKINDLE_BIN=$opt/bin
# CRIU's CUDA plugin runs our cuda-checkpoint, whose output CRIU drops on
# success: have it log every step here.
export REKINDLE_CUDA_CHECKPOINT_LOG=$out/cuda-checkpoint.log
nvidia-ctk cdi list
# The CUDA driver held initialized, as rekindle-cuda-hold.service does on a
# provisioned host (REKINDLE_CUDA_HOLD=0: not); 510 stops it for one restore
# to measure what it saves.
export REKINDLE_CUDA_HOLD_PIDFILE=/run/rekindle-cuda-hold.pid
if [ "${REKINDLE_CUDA_HOLD:-1}" = 1 ]; then
	setsid "$opt/bin/cuda-checkpoint" --hold </dev/null >/dev/null 2>&1 &
	echo $! >"$REKINDLE_CUDA_HOLD_PIDFILE"
	trap 'kill "$(cat "$REKINDLE_CUDA_HOLD_PIDFILE" 2>/dev/null)" 2>/dev/null; rm -f "$REKINDLE_CUDA_HOLD_PIDFILE"' EXIT
else
	rm -f "$REKINDLE_CUDA_HOLD_PIDFILE"
fi
criu check || echo "warning: criu check failed"
export REKINDLE_BATS_FILES=${REKINDLE_BATS_FILES:-tests/bats/500-gpu.bats tests/bats/510-vllm.bats tests/bats/520-sglang.bats}
export REKINDLE_BATS_FLAGS="--no-tempdir-cleanup ${REKINDLE_BATS_FLAGS:-}"
"$root/tests/run.sh"
rc=$?
# Every log the tests kept (containerd's, the containers'), in one archive:
# what comes back from a GPU host without a shell (CI, a test farm) is a few files.
find /tmp/rekindle-test "$criulogs" -name '*.log' -size -8M -print0 2>/dev/null |
	tar --null -czf "$out/logs.tgz" -T - 2>/dev/null || true
exit $rc
