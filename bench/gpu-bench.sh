#!/usr/bin/env bash
# gpu-bench.sh [BUNDLE.tar.xz]: bench/bench.sh for the GPU reference engine
# (images/gpu-engine/) on a GPU host: cold start vs first restore vs cached
# restore, side by side, plus the pinned host-to-device bandwidth and the
# weight reload ratio (weights bytes / the engine's reload seconds, against
# that bandwidth). Same JSON schema as the CPU run.
#
# Runs in tests/gpu/run.sh's environment: the stack unpacked in /opt/rekindle
# (PATH=/opt/rekindle/bin), CRIU's CUDA plugin installed, a CDI spec in
# /etc/cdi, io_uring disabled. Given BUNDLE (scripts/gpu-bundle.sh's
# output), it prepares the host that way itself; without one it expects
# tests/gpu/run.sh to have run in this boot.
#
# Environment (besides bench.sh's BENCH_REPS, BENCH_DROP_CACHES, BENCH_OUT, BENCH_PULL...):
#   GPU_BENCH_GPU        GPU index for every container of the rows (0; the first of GPU_BENCH_TP)
#   GPU_BENCH_TP         vllm, sglang: tensor parallel size N (1): N GPUs a container (serve.py sets what a
#                        checkpoint of that needs, docs/multi-gpu.md); sglang only with
#                        REKINDLE_SGLANG_MULTI_GPU=1, as oci-checkpoint refuses it otherwise
#   GPU_BENCH_REPLICAS   N (1): after the rows, N replicas restored at once from one checkpoint image,
#                        replica i on GPUs i*TP .. i*TP+TP-1, first and cached, against one (bench.sh:
#                        BENCH_REPLICAS); "replicas" in the result. BENCH_REPS=1 saves time
#   GPU_BENCH_CHECKPOINT_FLAGS  oci-checkpoint create flags instead of --engine sglang (see below)
#   GPU_BENCH_RUN_FLAGS  more nerdctl run flags for the rows' containers, e.g.
#                        --env=REKINDLE_SGLANG_EMPTY_CACHE=0 to measure a knob of an engine's beside its default
#   GPU_BENCH_WEIGHT_SET  1: weights from a rekindle-weights set (see below)
#   GPU_BENCH_ENGINE     reference (images/gpu-engine) or transformers (the hf-engine image:
#                        transformers' model code, torch.compile, CUDA graphs; cold starts take minutes)
#                        or vllm (the vllm-engine image: the host's vLLM on REKINDLE_VLLM_MODEL,
#                        checkpointed with --engine vllm; vLLM from REKINDLE_VLLM_SITE)
#                        or sglang (the sglang-engine image: the host's SGLang from REKINDLE_SGLANG_SITE
#                        on the same model, checkpointed with --engine sglang; its kernels prebuilt by
#                        integrations/sglang/prebuild-kernels.sh)
#   GPU_BENCH_VLLM_ARGS  vllm: more vllm serve flags (--max-model-len 2048 --gpu-memory-utilization 0.4)
#   GPU_BENCH_SGLANG_ARGS sglang: more launch_server flags (--context-length 2048 --mem-fraction-static 0.4
#                        --cuda-graph-max-bs 8)
#   GPU_BENCH_VLLM_SHAPE vllm, sglang: the model's shape, tests/gpu/make-model.py --shape (qwen2-1b; qwen3-8b
#                        is 16.4 GB, llama-70b 141 GB: GPU_BENCH_TP=2 on H200s, 4 on H100s), made in REKINDLE_VLLM_MODEL (/var/tmp/rekindle-vllm-model, or
#                        /var/tmp/rekindle-vllm-SHAPE for another shape) when absent; with
#                        GPU_BENCH_WEIGHT_SET=1 the set is loaded from that folder and the engine reads
#                        it through its plugin (integrations/vllm/rekindle_vllm.py, integrations/sglang/rekindle_sglang.py)
#   GPU_BENCH_GB         model size, ENGINE_PARAMS_GB (8: Qwen2.5-7B shapes, 12 layers; 1 for transformers)
#   GPU_BENCH_PORT       engine port on the host network (30000)
#   GPU_BENCH_H2D_MB     bytes copied per host-to-device measure (1024)
#   GPU_BENCH_CUDA_HOLD  0: leave the CUDA driver unheld (default 1: cuda-checkpoint --hold runs
#                        beside the rows, as rekindle-cuda-hold.service does on a provisioned host)
#   REKINDLE_GPU_WEIGHTS host folder for the weights file (/var/tmp/rekindle-weights)
#   REKINDLE_PYTHON      host interpreter with torch (python3)
#   REKINDLE_WHEELS      folder with the torch_memory_saver wheel, when the host lacks it (.whl)
#
# Output: $OUT (when set, e.g. by a test farm that collects it) or build/bench: gpu-TIMESTAMP.json,
# .md and latest-gpu.*; the chart needs matplotlib, which GPU hosts may lack:
# make it elsewhere with bench/bench-report.py RESULT.json --png CHART.png.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
. "$root/scripts/lib.sh"
need_root
opt=/opt/rekindle

if [ $# -ge 1 ]; then
	"$root/tests/gpu/prepare.sh" "$(realpath "$1")"
fi
if [ -z "${REKINDLE_BIN:-}" ] && [ -x "$opt/bin/containerd" ]; then
	export REKINDLE_BIN=$opt/bin PATH=$opt/bin:$PATH
fi
bin=${REKINDLE_BIN:-$root/build/bin}
[ -x "$bin/containerd" ] || die "no stack in $bin: pass the bundle (scripts/gpu-bundle.sh) or run tests/gpu/run.sh first"
[ -f /usr/local/lib/criu/cuda_plugin.so ] || die "CRIU's CUDA plugin is not in /usr/local/lib/criu: pass the bundle or run tests/gpu/run.sh first"
compgen -G '/etc/cdi/*.yaml' >/dev/null || compgen -G '/var/run/cdi/*.yaml' >/dev/null ||
	die "no CDI spec in /etc/cdi: run 'nvidia-ctk cdi generate --output=/etc/cdi/nvidia.yaml'"
nvidia-smi -L >/dev/null 2>&1 || die "nvidia-smi -L fails: no GPU here"
[ "$(sysctl -n kernel.io_uring_disabled 2>/dev/null || echo 0)" = 2 ] ||
	note "warning: kernel.io_uring_disabled is not 2; an engine using io_uring cannot be checkpointed"

images=$root/build/images
[ -f "$images/gpu-engine.tar" ] || images=$bin/../images
[ -f "$images/gpu-engine.tar" ] || die "gpu-engine.tar is in neither build/images nor $bin/../images"

gpu=${GPU_BENCH_GPU:-0}
tp=${GPU_BENCH_TP:-1}
nrep=${GPU_BENCH_REPLICAS:-1}
[[ $tp =~ ^[1-9][0-9]*$ ]] || die "GPU_BENCH_TP=$tp: want a positive integer"
[[ $nrep =~ ^[1-9][0-9]*$ ]] || die "GPU_BENCH_REPLICAS=$nrep: want a positive integer"
case ${GPU_BENCH_ENGINE:-reference} in vllm | sglang) llm=1 ;; *) llm=0 ;; esac
[ "$tp" -eq 1 ] || [ "$llm" = 1 ] || die "GPU_BENCH_TP=$tp: tensor parallel is for GPU_BENCH_ENGINE=vllm or sglang"
[ "$tp" -eq 1 ] || [ "${GPU_BENCH_ENGINE:-}" != sglang ] || [ "${REKINDLE_SGLANG_MULTI_GPU:-}" = 1 ] ||
	die "GPU_BENCH_TP=$tp GPU_BENCH_ENGINE=sglang: oci-checkpoint refuses SGLang on several GPUs (docs/multi-gpu.md); set REKINDLE_SGLANG_MULTI_GPU=1 to try it"
ngpu=$(nvidia-smi -L | wc -l)
[ $((gpu + tp)) -le "$ngpu" ] || die "GPU_BENCH_GPU=$gpu GPU_BENCH_TP=$tp: GPUs $gpu..$((gpu + tp - 1)), this host has $ngpu"
[ $((nrep * tp)) -le "$ngpu" ] || die "GPU_BENCH_REPLICAS=$nrep x GPU_BENCH_TP=$tp GPUs: this host has $ngpu"
# devices A N: the CDI names of GPUs A .. A+N-1, comma-separated.
devices() { seq -s, -f 'nvidia.com/gpu=%g' "$1" "$(($1 + $2 - 1))"; }
export BENCH_DEVICES BENCH_REPLICAS=$nrep BENCH_REPLICA_DEVICES=
BENCH_DEVICES=$(devices "$gpu" "$tp")
if [ "$nrep" -gt 1 ]; then
	for ((i = 0; i < nrep; i++)); do BENCH_REPLICA_DEVICES+="${BENCH_REPLICA_DEVICES:+ }$(devices $((i * tp)) "$tp")"; done
fi
case ${GPU_BENCH_ENGINE:-reference} in
reference) gb=${GPU_BENCH_GB:-8} ;;
transformers)
	gb=${GPU_BENCH_GB:-1}
	export BENCH_ENGINE_IMAGE=rekindle.local/hf-engine:latest BENCH_ENGINE_TAR=hf-engine
	[ -f "$images/hf-engine.tar" ] || die "hf-engine.tar is not in $images: run 'make build/images/hf-engine.tar' (and rebuild the bundle)"
	;;
vllm)
	gb=0
	export BENCH_ENGINE_IMAGE=rekindle.local/vllm-engine:latest BENCH_ENGINE_TAR=vllm-engine BENCH_API=openai
	[ -f "$images/vllm-engine.tar" ] || die "vllm-engine.tar is not in $images: run 'make build/images/vllm-engine.tar' (and rebuild the bundle)"
	;;
sglang)
	gb=0
	export BENCH_ENGINE_IMAGE=rekindle.local/sglang-engine:latest BENCH_ENGINE_TAR=sglang-engine BENCH_API=sglang
	[ -f "$images/sglang-engine.tar" ] || die "sglang-engine.tar is not in $images: run 'make build/images/sglang-engine.tar' (and rebuild the bundle)"
	;;
*) die "GPU_BENCH_ENGINE=$GPU_BENCH_ENGINE: want reference, transformers, vllm or sglang" ;;
esac
vllm_site=${REKINDLE_VLLM_SITE:-/var/tmp/vllm-site} sglang_site=${REKINDLE_SGLANG_SITE:-/var/tmp/sglang-site}
vllm_shape=${GPU_BENCH_VLLM_SHAPE:-qwen2-1b}
vllm_model=${REKINDLE_VLLM_MODEL:-/var/tmp/rekindle-vllm-$([ "$vllm_shape" = qwen2-1b ] && echo model || echo "$vllm_shape")}
port=${GPU_BENCH_PORT:-$([ "${GPU_BENCH_ENGINE:-}" = vllm ] && echo 8000 || echo 30000)}
weights=${REKINDLE_GPU_WEIGHTS:-/var/tmp/rekindle-weights}
py=$(command -v "${REKINDLE_PYTHON:-python3}") || die "no ${REKINDLE_PYTHON:-python3} on PATH"
"$py" -c 'import torch; assert torch.cuda.is_available()' 2>/dev/null ||
	die "$py has no torch with CUDA: the GPU engine runs the host's Python + PyTorch (set REKINDLE_PYTHON)"
work=$(mktemp -d /tmp/rekindle-gpu-bench.XXXXXX)
hold_pid='' wpid=''
cleanup() {
	[ -z "$hold_pid" ] || kill "$hold_pid" 2>/dev/null
	if [ -n "$wpid" ]; then
		kill "$wpid" 2>/dev/null
		wait "$wpid" 2>/dev/null
		umount "$wroot/sets" 2>/dev/null
	fi
	rm -rf "$work"
}
trap cleanup EXIT

# torch_memory_saver: the host's, or installed from a wheel into a folder
# that host-python.sh then binds into the container (as 500-gpu.bats does).
site=
if [ "${GPU_BENCH_ENGINE:-}" = vllm ]; then
	PYTHONPATH=$vllm_site "$py" -c 'import vllm' 2>/dev/null ||
		die "no vLLM importable from $vllm_site: install vLLM 0.24.0 there (images/README.md, vLLM engine) or set REKINDLE_VLLM_SITE"
	site=$vllm_site
elif [ "${GPU_BENCH_ENGINE:-}" = sglang ]; then
	[ -d "$sglang_site/sglang" ] ||
		die "no SGLang in $sglang_site: install SGLang 0.5.17 there (integrations/sglang/wheels.sh; images/README.md, SGLang engine) or set REKINDLE_SGLANG_SITE"
	site=$sglang_site
	sargs=${GPU_BENCH_SGLANG_ARGS:---context-length 2048 --mem-fraction-static 0.4 --cuda-graph-max-bs 8}
	[ "$tp" -eq 1 ] || sargs+=" --tp-size $tp"
elif ! "$py" -c 'import torch_memory_saver' 2>/dev/null; then
	wheels=${REKINDLE_WHEELS:-$root/.whl}
	whl=$(ls "$wheels"/torch_memory_saver-*.whl 2>/dev/null | tail -1)
	[ -n "$whl" ] || die "torch_memory_saver is not installed for $py and no wheel in $wheels (images/README.md says how to fetch it)"
	site=$work/site
	"$py" -m pip install -q --no-index --no-deps --no-compile --target "$site" "$whl"
fi
# vLLM and SGLang serve the same test model, made once.
if [ "$llm" = 1 ] && [ ! -f "$vllm_model/config.json" ]; then
	"$py" "$root/tests/gpu/make-model.py" --shape "$vllm_shape" "$vllm_model" || die "tests/gpu/make-model.py failed"
fi
if [ "${GPU_BENCH_ENGINE:-}" = sglang ]; then
	# The kernels SGLang compiles at first use, built here once per shape and
	# layout: the container has no CUDA compiler.
	PREBUILD_ARGS=$([ "$tp" -eq 1 ] || echo "--tp-size $tp") \
		"$root/integrations/sglang/prebuild-kernels.sh" "$sglang_site" "$vllm_model" "$py" >&2 ||
		die "integrations/sglang/prebuild-kernels.sh failed"
fi
mapfile -t pyflags < <(PYTHONPATH=${site}${site:+${PYTHONPATH:+:}}${PYTHONPATH:-} \
	"$root/images/gpu-engine/host-python.sh" "$py") || die "images/gpu-engine/host-python.sh failed"

# The weights file, written once, so no cold start measures its generation.
mkdir -p "$weights"
if [ "$llm" = 0 ]; then
	wfile=$weights/$(ENGINE_PARAMS_GB=$gb "$py" "$root/images/gpu-engine/server.py" config |
		"$py" -c 'import json, os, sys; print(os.path.basename(json.load(sys.stdin)["weights_path"]))')
	if [ ! -f "$wfile" ]; then
		note "writing the ${gb} GB weights file $wfile"
		ENGINE_PARAMS_GB=$gb ENGINE_WEIGHTS_DIR=$weights ENGINE_MEMORY_SAVER=0 \
			"$py" "$root/images/gpu-engine/server.py" make-weights >/dev/null ||
			die "server.py make-weights failed"
	fi
fi

# Pinned (and pageable) host-to-device copy bandwidth, with torch; bench.sh
# runs it each repetition, when no engine holds the GPU.
cat >"$work/h2d.py" <<'PY'
import json, statistics, sys, time
import torch
n = int(sys.argv[1]) << 20
dev = torch.device("cuda", 0)
dst = torch.empty(n, dtype=torch.uint8, device=dev)
def bw(src, runs=7):
    dst.copy_(src, non_blocking=True); torch.cuda.synchronize()  # warm up
    out = []
    for _ in range(runs):
        t = time.perf_counter()
        dst.copy_(src, non_blocking=True)
        torch.cuda.synchronize()
        out.append(n / (time.perf_counter() - t) / 1e9)
    return out
pinned = bw(torch.full((n,), 7, dtype=torch.uint8).pin_memory())
pageable = bw(torch.full((n,), 7, dtype=torch.uint8))
print(json.dumps({"h2d": {"bytes": n, "device": torch.cuda.get_device_name(dev),
                          "pinned_gbps": round(statistics.median(pinned), 3), "pinned_best_gbps": round(max(pinned), 3),
                          "pageable_gbps": round(statistics.median(pageable), 3)}}))
PY
printf '#!/bin/sh\nCUDA_VISIBLE_DEVICES=%s exec %s %s %s\n' "$gpu" "$py" "$work/h2d.py" "${GPU_BENCH_H2D_MB:-1024}" >"$work/h2d"
chmod 0755 "$work/h2d"

# cuda-checkpoint logs each timed step here (CRIU's plugin drops its
# output): bench.sh takes each restore's CUDA restore from it.
export REKINDLE_CUDA_CHECKPOINT_LOG=${REKINDLE_CUDA_CHECKPOINT_LOG:-$work/cuda-checkpoint.log}

# The CUDA driver held initialized during the runs, as on a provisioned
# host (systemd/rekindle-cuda-hold.service); GPU_BENCH_CUDA_HOLD=0: not.
if [ "${GPU_BENCH_CUDA_HOLD:-1}" = 1 ]; then
	setsid "$bin/cuda-checkpoint" --hold </dev/null >"$work/cuda-hold.log" 2>&1 &
	hold_pid=$!
fi
export BENCH_ENGINE=gpu BENCH_IMAGES=$images BENCH_PORT=$port BENCH_EXTRA_BANDWIDTH=$work/h2d
export BENCH_OUT=${BENCH_OUT:-${OUT:-$root/build/bench}}
# GPU_BENCH_CHECKPOINT_FLAGS replaces the profile, e.g. "--engine generic
# --quiesce 'GET /health' --resume 'GET /health'" keeps the weights on the GPU:
# a checkpoint of the model's size, for the image I/O numbers.
export BENCH_CHECKPOINT_FLAGS="--port $port ${GPU_BENCH_CHECKPOINT_FLAGS:---engine sglang}"
export BENCH_RUN_FLAGS="${pyflags[*]} --volume=$weights:/weights --env=ENGINE_PARAMS_GB=$gb --env=ENGINE_PORT=$port"
if [ "${GPU_BENCH_ENGINE:-}" = vllm ]; then
	BENCH_CHECKPOINT_FLAGS="--port $port ${GPU_BENCH_CHECKPOINT_FLAGS:---engine vllm}"
	# The flags hold spaces, which BENCH_RUN_FLAGS cannot: an env file.
	vargs=${GPU_BENCH_VLLM_ARGS:---max-model-len 2048 --gpu-memory-utilization 0.4}
	[ "$tp" -eq 1 ] || vargs+=" --tensor-parallel-size $tp"
	echo "ENGINE_VLLM_ARGS=$vargs" >"$work/vllm.env"
	BENCH_RUN_FLAGS="${pyflags[*]} --volume=$vllm_model:/models/model:ro --env=ENGINE_PORT=$port --env-file=$work/vllm.env"
	# NCCL keeps its files in /dev/shm (docs/multi-gpu.md).
	[ "$tp" -eq 1 ] || BENCH_RUN_FLAGS+=" --shm-size 1g"
elif [ "${GPU_BENCH_ENGINE:-}" = sglang ]; then
	BENCH_CHECKPOINT_FLAGS="--port $port ${GPU_BENCH_CHECKPOINT_FLAGS:---engine sglang}"
	echo "ENGINE_SGLANG_ARGS=$sargs" >"$work/sglang.env"
	BENCH_RUN_FLAGS="${pyflags[*]} --volume=$vllm_model:/models/model:ro --env=ENGINE_PORT=$port --env-file=$work/sglang.env --shm-size 1g"
fi
BENCH_RUN_FLAGS+=${GPU_BENCH_RUN_FLAGS:+ $GPU_BENCH_RUN_FLAGS}
knobs=${GPU_BENCH_WEIGHT_SET:+ GPU_BENCH_WEIGHT_SET=1}
[ "${GPU_BENCH_CUDA_HOLD:-1}" = 1 ] || knobs+=" GPU_BENCH_CUDA_HOLD=0"
[ "$llm" = 0 ] || knobs+=" GPU_BENCH_VLLM_SHAPE=$vllm_shape"
[ "$tp" -eq 1 ] || knobs+=" GPU_BENCH_TP=$tp"
[ -z "${GPU_BENCH_RUN_FLAGS:-}" ] || knobs+=" GPU_BENCH_RUN_FLAGS='$GPU_BENCH_RUN_FLAGS'"
[ "$nrep" -eq 1 ] || knobs+=" GPU_BENCH_REPLICAS=$nrep"
export BENCH_COMMAND="bench/gpu-bench.sh (BENCH_REPS=${BENCH_REPS:-5} GPU_BENCH_ENGINE=${GPU_BENCH_ENGINE:-reference} GPU_BENCH_GB=$gb$knobs)"

# GPU_BENCH_WEIGHT_SET=1: the engine takes its weights from a set that the
# rekindle-weights service loads from the weights file (page cache dropped
# first, so the load's rate is against the disk) and keeps in its tmpfs;
# the set is bind-mounted where the service's CDI device would put it.
if [ "${GPU_BENCH_WEIGHT_SET:-0}" = 1 ]; then
	[ -x "$bin/rekindle-weights" ] || die "$bin/rekindle-weights is missing: run 'make build' (and rebuild the bundle)"
	wroot=$work/weights-service wsock=$work/weights.sock
	"$bin/rekindle-weights" --socket "$wsock" serve --root "$wroot" --state "$work/weights-state.json" --cdi-dir "" \
		--quota "$([ "$llm" = 1 ] && echo 0 || echo "$((gb + 2))G")" >"$work/weights-service.log" 2>&1 &
	wpid=$!
	for _ in $(seq 100); do [ -S "$wsock" ] && break; sleep 0.1; done
	# vLLM's and SGLang's set is their model folder's safetensors files
	# (their plugins check them against the folder); the reference engine's, its file.
	if [ "$llm" = 1 ]; then
		setname=$GPU_BENCH_ENGINE-$vllm_shape wsrc=$vllm_model
	else
		setname=$(basename "$wfile" .safetensors) wsrc=$wfile
	fi
	sync && echo 3 >/proc/sys/vm/drop_caches
	t=$EPOCHREALTIME
	"$bin/rekindle-weights" --socket "$wsock" load --quiet "$setname" "$wsrc" || die "rekindle-weights load failed: $(tail -5 "$work/weights-service.log")"
	note "weight set $setname loaded by rekindle-weights in $(awk -v a="$t" -v b="$EPOCHREALTIME" -v n="$(du -sb "$wsrc" | cut -f1)" 'BEGIN { printf "%.2fs (%.2f GB/s from a cold page cache)", b - a, n / (b - a) / 1e9 }')"
	BENCH_RUN_FLAGS+=" --volume=$wroot/sets/$setname:/rekindle/weights/$setname:ro --env=ENGINE_WEIGHT_SET=/rekindle/weights/$setname"
fi
{
	nvidia-smi --query-gpu=index,name,uuid,driver_version,memory.total --format=csv
	"$py" -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda)'
} >&2
"$root/bench/bench.sh"
