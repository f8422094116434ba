#!/usr/bin/env bash
# weights-check.sh: on a GPU host, in one run (< 3 minutes, 8 GB): the pinned
# host-to-device floor, the register time of a weight set, and the GPU
# reference engine's reload GB/s from the registered set beside its reload
# from the file (tests/gpu/weights_check.py measures). Needs only the host's
# Python + PyTorch (+ numpy, for make-weights): no stack, no bundle.
#
# The set is made here the way rekindle-weights lays one out: a tmpfs mounted
# huge=within_size (standing in for the service's ROOT/sets), the engine's
# weights file written into SETS/NAME by server.py make-weights, then
# rekindle-set.json, last.
#
#   REKINDLE_PYTHON     host interpreter with torch (python3)
#   WEIGHTS_CHECK_GB    model size, ENGINE_PARAMS_GB (8)
#   OUT                 where weights-check.json goes (also the log)
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
. "$root/scripts/lib.sh"
need_root
py=$(command -v "${REKINDLE_PYTHON:-python3}") || die "no ${REKINDLE_PYTHON:-python3} on PATH"
"$py" -c 'import torch; assert torch.cuda.is_available()' 2>/dev/null ||
	die "$py has no torch with CUDA (set REKINDLE_PYTHON)"
gb=${WEIGHTS_CHECK_GB:-8}
# The client's unit tests first, here where CUDA is: registration and stream
# copies of a small set in /dev/shm (they skip on CPU-only machines).
ulog=${OUT:-/tmp}/weights-unit.log
if ! (cd "$root/integrations/weights" && TMPDIR=/dev/shm "$py" -B -m unittest -v test_rekindle_weights) >"$ulog" 2>&1; then
	cat "$ulog"
	die "integrations/weights unit tests failed"
fi
note "unit tests: $(grep -c ' ok$' "$ulog") ok, $(grep -c '\.\.\. skipped' "$ulog") skipped ($ulog)"
server=$root/images/gpu-engine/server.py

work=$(mktemp -d /tmp/rekindle-weights-check.XXXXXX)
sets=$work/sets
cleanup() {
	mountpoint -q "$sets" && { umount "$sets" || umount -l "$sets"; }
	rm -rf "$work"
}
trap cleanup EXIT
mkdir -p "$sets"
mount -t tmpfs -o "huge=within_size,size=$((${gb%.*} + 2))g,mode=0755" rekindle-weights-check "$sets" ||
	die "cannot mount a tmpfs with huge=within_size on $sets"

name=$(ENGINE_PARAMS_GB=$gb "$py" "$server" config | "$py" -c 'import json, sys; print(json.load(sys.stdin)["model_id"])')
set=$sets/$name
mkdir "$set"
t=$EPOCHREALTIME
ENGINE_PARAMS_GB=$gb ENGINE_MEMORY_SAVER=0 ENGINE_KV_GB=0.1 CUDA_VISIBLE_DEVICES=${CUDA_VISIBLE_DEVICES:-0} \
	"$py" "$server" make-weights "$set/model.safetensors" >"$work/make.json" ||
	die "server.py make-weights failed"
"$py" - "$set" <<'PY'
import json, os, sys, time
d = sys.argv[1]
files = [{"name": f, "size": os.path.getsize(os.path.join(d, f))} for f in sorted(os.listdir(d))]
man = {"name": os.path.basename(d), "files": files, "bytes": sum(f["size"] for f in files),
       "loaded_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "sources": ["server.py make-weights"]}
with open(os.path.join(d, ".rekindle-set.json.tmp"), "w") as f:
    json.dump(man, f)
os.rename(os.path.join(d, ".rekindle-set.json.tmp"), os.path.join(d, "rekindle-set.json"))
PY
note "set $name written in $(awk -v a="$t" -v b="$EPOCHREALTIME" 'BEGIN { printf "%.1f", b - a }')s: $(du -sh "$set" | cut -f1)"
CUDA_VISIBLE_DEVICES=${CUDA_VISIBLE_DEVICES:-0} "$py" "$root/tests/gpu/weights_check.py" "$set" "$gb" 2>&1 |
	tee ${OUT:+"$OUT/weights-check.log"}
