#!/bin/bash
# GPU test of the CRIU plugin path (needs 2+ GPUs, torch, and CRIU 4.2.1 with
# its cuda_plugin.so). A torch process on GPU1 is dumped by `criu dump` and
# restored by `criu restore`; the CUDA plugin runs this cuda-checkpoint from
# PATH, whose `--action restore` finds devices.json (GPU1) and the /dev node
# of GPU0 in a fake proc tree for that pid and remaps onto GPU0.
# CRIU=path/to/criu  PLUGINS=dir with cuda_plugin.so  (libraries: LD_LIBRARY_PATH)
set -u
here=$(cd "$(dirname "$0")/.." && pwd)
CRIU=${CRIU:-criu} PLUGINS=${PLUGINS:-/usr/lib/criu}
W=$(mktemp -d /tmp/cc-criu.XXXXXX) D=/dev/shm/cc-criu-images
bad=0
export PATH=$here:$PATH REKINDLE_CUDA_CHECKPOINT_LOG=$W/cuda-checkpoint.log

uuid() { nvidia-smi --query-gpu=uuid --format=csv,noheader -i "$1"; }
minor_of() { grep -l "$1" /proc/driver/nvidia/gpus/*/information | xargs grep 'Device Minor' | awk '{print $NF}'; }
where() { nvidia-smi --query-compute-apps=pid,gpu_uuid --format=csv,noheader | awk -F', ' -v p="$1" '$1 == p {print $2}'; }
expect() { if [[ "$1" == "$2" ]]; then echo "  ok: $3"; else echo "  FAIL: $3: want '$2', got '$1'"; bad=1; fi; }
timed() { local s=$EPOCHREALTIME; "$@"; local r=$?; echo "  $(awk "BEGIN{printf \"%.2f\", $EPOCHREALTIME-$s}")s rc=$r: ${*:1:2}"; return $r; }

U0=$(uuid 0) U1=$(uuid 1)
echo "cuda-checkpoint: $(command -v cuda-checkpoint); criu: $($CRIU --version | head -1)"
cat >"$W/hold.py" <<'EOF'
import os, sys, time, torch
x = torch.full((1 << 28,), 1.0, device="cuda")  # 1 GiB that must survive
i = 0
while True:
    i += 1
    with open(sys.argv[1] + ".tmp", "w") as f:
        f.write(f"{i} {x.sum().item()}\n")
    os.rename(sys.argv[1] + ".tmp", sys.argv[1])
    time.sleep(0.2)
EOF
CUDA_VISIBLE_DEVICES=1 setsid python3 "$W/hold.py" "$W/hb" </dev/null >"$W/hold.log" 2>&1 &
pid=$!
for _ in $(seq 100); do [[ -s $W/hb ]] && break; sleep 0.2; done
expect "$(where $pid)" "$U1" "starts on GPU1"

fp=$W/proc
mkdir -p "$fp/$pid/root/dev" "$fp/$pid/root/.rekindle"
ln -s /proc/driver "$fp/driver"
touch "$fp/$pid/root/dev/nvidia$(minor_of "$U0")"
printf '[{"uuid": "%s", "minor": %s}]\n' "$U1" "$(minor_of "$U1")" >"$fp/$pid/root/.rekindle/devices.json"

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
echo "== $([[ $bad == 0 ]] && echo PASS || echo FAIL)"
[[ $bad == 0 ]]
