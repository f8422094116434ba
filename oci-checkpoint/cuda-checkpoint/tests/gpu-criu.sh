#!/bin/bash
# GPU test of the CRIU plugin path (needs 2+ GPUs, torch, and CRIU 4.2.1 with
# its cuda_plugin.so). A torch process on GPU1 is dumped by `criu dump` and
# restored by `criu restore`; the CUDA plugin runs this cuda-checkpoint from
# PATH, whose `--action restore` finds devices.json (GPU1) and the /dev node
# of GPU0 in a fake proc tree for that pid and remaps onto GPU0.
# CRIU=path/to/criu  PLUGINS=dir with cuda_plugin.so  (libraries: LD_LIBRARY_PATH)
set -u
. "$(dirname "$0")/gpu-lib.sh"
here=$(cd "$(dirname "$0")/.." && pwd)
CRIU=${CRIU:-criu} PLUGINS=${PLUGINS:-/usr/lib/criu}
W=$(mktemp -d /tmp/cc-criu.XXXXXX) D=/dev/shm/cc-criu-images
export PATH=$here:$PATH REKINDLE_CUDA_CHECKPOINT_LOG=$W/cuda-checkpoint.log

timed() { local s=$EPOCHREALTIME; "$@"; local r=$?; echo "  $(awk "BEGIN{printf \"%.2f\", $EPOCHREALTIME-$s}")s rc=$r: ${*:1:2}"; return $r; }

U0=$(uuid 0) U1=$(uuid 1)
echo "cuda-checkpoint: $(command -v cuda-checkpoint); criu: $($CRIU --version | head -1)"
hold "$W" setsid
expect "$(where $pid)" "$U1" "starts on GPU1"

fp=$W/proc
fake_proc "$fp" $pid "$(printf '[{"uuid": "%s", "minor": %s}]' "$U1" "$(minor_of "$U1")")"

rm -rf "$D" && mkdir -p "$D"
timed "$CRIU" dump -t $pid -D "$D" -o dump.log -v4 --libdir "$PLUGINS" || { bad=1; tail -30 "$D/dump.log"; }
before=$(cat "$W/hb")
grep -h "cuda_plugin" "$D/dump.log" | head -8
REKINDLE_PROC=$fp timed "$CRIU" restore -D "$D" -o restore.log -v4 -d --libdir "$PLUGINS" ||
	{ bad=1; tail -30 "$D/restore.log"; }
grep -h "cuda_plugin" "$D/restore.log" | head -12
sleep 2
expect "$(where $pid)" "$U0" "restored onto GPU0"
echo "  heartbeat before: $before  after: $(cat "$W/hb")"
expect "$(awk '{print $2}' "$W/hb")" 268435456.0 "GPU memory intact"
echo "-- cuda-checkpoint log"; cat "$W/cuda-checkpoint.log"
kill $pid 2>/dev/null
rm -rf "$D"
verdict
