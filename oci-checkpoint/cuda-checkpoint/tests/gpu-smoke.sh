#!/bin/bash
# GPU smoke test against the real driver (needs 2+ GPUs, nvidia-smi, python3
# with torch). Without CRIU: a torch process on GPU1 is locked and
# checkpointed in place, restored onto GPU0 through the automatic remap
# (devices.json + /dev nodes, in a fake proc tree that links the real
# /proc/driver), then moved back with a lone --device-map pair, which the
# tool completes to the swap the driver accepts.
set -u
. "$(dirname "$0")/gpu-lib.sh"
bin=${CUDA_CHECKPOINT:-$(cd "$(dirname "$0")/.." && pwd)/cuda-checkpoint}
W=$(mktemp -d /tmp/cc-smoke.XXXXXX)

step() { echo "+ ${*#env }"; "$@"; local r=$?; echo "  rc=$r"; return $r; }

U0=$(uuid 0) U1=$(uuid 1)
echo "GPU0 $U0 (minor $(minor_of "$U0")), GPU1 $U1 (minor $(minor_of "$U1"))"
hold "$W"
echo "pid $pid heartbeat: $(cat "$W/hb")"
expect "$(where $pid)" "$U1" "starts on GPU1"

round() { # $1: extra restore args/env, $2: GPU expected after
	step "$bin" --get-restore-tid --pid $pid
	step "$bin" --action lock --pid $pid --timeout 10000 || bad=1
	step "$bin" --action checkpoint --pid $pid || bad=1
	expect "$("$bin" --get-state --pid $pid)" checkpointed "state after checkpoint"
	expect "$(where $pid)" "" "off the GPU while checkpointed"
	local before; before=$(cat "$W/hb")
	step env $1 "$bin" -v --action restore --pid $pid || bad=1
	step "$bin" --action unlock --pid $pid || bad=1
	sleep 1.5
	expect "$("$bin" --get-state --pid $pid)" running "state after unlock"
	expect "$(where $pid)" "$2" "now on the remapped GPU"
	echo "  heartbeat before: $before  after: $(cat "$W/hb")"
	expect "$(awk '{print $2}' "$W/hb")" 268435456.0 "GPU memory intact"
}

echo "== round 1: automatic remap, recorded GPU1, container sees GPU0"
fp=$W/proc
fake_proc "$fp" $pid "$(printf '[{"uuid": "%s", "pci_bus_id": "", "minor": %s}]' "$U1" "$(minor_of "$U1")")"
round "REKINDLE_PROC=$fp" "$U0"

echo "== round 2: lone --device-map pair GPU0=GPU1, completed to the swap"
round "REKINDLE_DEVICE_MAP=$U0=$U1" "$U1"

echo "== not a CUDA process"
step "$bin" --get-restore-tid --pid $$ && bad=1
kill $pid
verdict
