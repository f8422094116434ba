#!/usr/bin/env bash
# prebuild-kernels.sh SITE MODEL [PYTHON]: build, on the GPU host, the kernels
# SGLang 0.5.17 compiles at run time for MODEL, into SITE, so that the
# sglang-engine container (which has no CUDA compiler) finds them built:
#   flashinfer's (its norm module: sgl_kernel's rmsnorm calls it) as
#     flashinfer's own prebuilt modules, SITE/flashinfer/data/aot/NAME/NAME.so
#   SGLang's tvm-ffi kernels (rope, activation, KV cache copies; specialised
#     by the model's shapes) in SITE/.cache/tvm-ffi, which serve.py names
#     in TVM_FFI_CACHE_DIR
# It starts SGLang on the host once (nvcc from the CUDA toolkit, /usr/local/cuda
# or CUDA_HOME), asks for a few tokens, and stops it. Run it for each model
# shape the host serves, and for each parallel layout (PREBUILD_ARGS: more
# launch_server flags, e.g. "--tp-size 2": each rank's kernels take its share
# of the heads); SITE/.cache/prebuilt/ records what was done, and a second run
# for the same model shape and flags does nothing.
set -euo pipefail
site=$(realpath "${1:?usage: $0 SITE MODEL [PYTHON]}")
model=$(realpath "${2:?usage: $0 SITE MODEL [PYTHON]}")
py=${3:-python3}
[ -f "$model/config.json" ] || { echo "prebuild-kernels.sh: no config.json in $model" >&2; exit 1; }
[ -d "$site/sglang" ] || { echo "prebuild-kernels.sh: no SGLang in $site (integrations/sglang/wheels.sh)" >&2; exit 1; }
extra=${PREBUILD_ARGS:-}
shape=$( (cat "$model/config.json"; echo "$extra") | sha256sum | cut -c1-16)
mark=$site/.cache/prebuilt/$shape
if [ -f "$mark" ]; then
	echo "prebuild-kernels.sh: kernels for $model's shape${extra:+ with $extra} ($shape) are built already"
	exit 0
fi
work=$(mktemp -d)
pgid=
cleanup() {
	[ -z "$pgid" ] || kill -- "-$pgid" 2>/dev/null || true
	rm -rf "$work"
}
trap cleanup EXIT
port=$("$py" -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
mkdir -p "$site/.cache/tvm-ffi" "$site/.cache/prebuilt"
echo "prebuild-kernels.sh: starting SGLang on $model to build its kernels (a few minutes)"
FLASHINFER_WORKSPACE_BASE=$work TVM_FFI_CACHE_DIR=$site/.cache/tvm-ffi PYTHONPATH=$site \
	setsid "$py" -m sglang.launch_server --model-path "$model" --host 127.0.0.1 --port "$port" \
	--enable-memory-saver --attention-backend triton --sampling-backend pytorch \
	--context-length 2048 --mem-fraction-static 0.3 --cuda-graph-max-bs 8 $extra >"$work/sglang.log" 2>&1 &
pgid=$!
ok=
for _ in $(seq 1 900); do
	if curl -fsS -m 120 -X POST -H 'Content-Type: application/json' \
		-d '{"text":"def main():","sampling_params":{"max_new_tokens":8,"temperature":0}}' \
		"http://127.0.0.1:$port/generate" >/dev/null 2>&1; then
		ok=1
		break
	fi
	kill -0 "$pgid" 2>/dev/null || break
	sleep 1
done
if [ -z "$ok" ]; then
	echo "prebuild-kernels.sh: SGLang did not serve; its log ends:" >&2
	tail -20 "$work/sglang.log" >&2
	exit 1
fi
kill -- "-$pgid" 2>/dev/null || true
pgid=
n=0
while IFS= read -r -d '' so; do
	name=$(basename "$so" .so)
	install -D -m 0644 "$so" "$site/flashinfer/data/aot/$name/$name.so"
	n=$((n + 1))
done < <(find "$work" -path '*cached_ops*' -name '*.so' -print0)
echo "$model $extra" >"$mark"
echo "prebuild-kernels.sh: built $n flashinfer module(s) and $(ls "$site/.cache/tvm-ffi" | wc -l) tvm-ffi kernel(s) into $site"
