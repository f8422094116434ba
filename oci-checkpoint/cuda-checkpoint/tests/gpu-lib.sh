# gpu-lib.sh: what gpu-smoke.sh and gpu-criu.sh share, sourced by both (a
# host with 2+ GPUs, nvidia-smi, python3 with torch): the GPUs' UUIDs and
# minors, where a process runs, expect (bad=1 on a miss), a torch process
# holding 1 GiB on GPU1, and the fake /proc tree its restore onto GPU0 reads.
# shellcheck shell=bash
bad=0

uuid() { nvidia-smi --query-gpu=uuid --format=csv,noheader -i "$1"; }
minor_of() { grep -l "$1" /proc/driver/nvidia/gpus/*/information | xargs grep 'Device Minor' | awk '{print $NF}'; }
where() { nvidia-smi --query-compute-apps=pid,gpu_uuid --format=csv,noheader | awk -F', ' -v p="$1" '$1 == p {print $2}'; }
expect() { if [[ "$1" == "$2" ]]; then echo "  ok: $3"; else echo "  FAIL: $3: want '$2', got '$1'"; bad=1; fi; }

# hold DIR [PREFIX...]: start (under PREFIX, e.g. setsid) a torch process on
# GPU1 holding 1 GiB of ones, which writes "N SUM" to DIR/hb every 0.2 s;
# sets pid and waits up to 20 s for its first heartbeat.
hold() {
	local w=$1
	shift
	cat >"$w/hold.py" <<'EOF'
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
	CUDA_VISIBLE_DEVICES=1 "$@" python3 "$w/hold.py" "$w/hb" </dev/null >"$w/hold.log" 2>&1 &
	# shellcheck disable=SC2034 # pid: the caller's
	pid=$!
	for _ in $(seq 100); do [[ -s $w/hb ]] && break; sleep 0.2; done
}

# fake_proc DIR PID DEVICES_JSON: DIR as a /proc for cuda-checkpoint's
# restore (REKINDLE_PROC): the real driver's folder, and PID's root whose
# /dev holds GPU0's node ($U0) and whose /.rekindle/devices.json, the GPUs
# recorded at checkpoint, is DEVICES_JSON.
fake_proc() {
	mkdir -p "$1/$2/root/dev" "$1/$2/root/.rekindle"
	ln -s /proc/driver "$1/driver"
	touch "$1/$2/root/dev/nvidia$(minor_of "$U0")"
	printf '%s\n' "$3" >"$1/$2/root/.rekindle/devices.json"
}

# verdict: PASS or FAIL, and the status to exit with.
verdict() {
	echo "== $([[ $bad == 0 ]] && echo PASS || echo FAIL)"
	[[ $bad == 0 ]]
}
