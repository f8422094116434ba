#!/usr/bin/env bash
# build.sh OUT.tar: the GPU reference engine image, one layer: a static
# busybox (the shell and tools launch.sh needs), /engine/{server.py,
# engine_http.py,hf_model.py,launch.sh,host-python.sh,rekindle_weights.py} and empty
# /weights and /rekindle/weights mount points. No Python
# or PyTorch inside: the container runs the GPU host's, bound in at run
# time (see README.md, host-python.sh), so the image stays about 1 MB and
# travels to a GPU machine beside the stack. Named
# rekindle.local/gpu-engine:latest.
#
# GPU_ENGINE_BACKEND=vllm builds rekindle.local/vllm-engine:latest: the
# transformers image's files plus /engine/vllm_serve.py (integrations/vllm/serve.py),
# which runs the host's vLLM on the model bound at /models/model.
#
# GPU_ENGINE_BACKEND=sglang builds rekindle.local/sglang-engine:latest: the
# same, with /engine/sglang_serve.py (integrations/sglang/serve.py), which runs
# the host's SGLang on the model bound at /models/model, memory saver on.
#
# GPU_ENGINE_BACKEND=transformers builds rekindle.local/hf-engine:latest
# instead: the same files run with transformers' model code, torch.compile
# and CUDA graphs (hf_model.py). torch.compile needs a C compiler at run
# time: /engine/cc runs the host's gcc from the bound /usr; /lib64's loader
# and /host/lib link to the host's, and the compile caches live in the
# container (/var/cache/engine), so every cold start compiles from scratch.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
. "$here/../lib.sh"
[ $# -eq 1 ] || die "usage: $0 OUT.tar"
out=$(realpath -m "$1")
backend=${GPU_ENGINE_BACKEND:-reference}
case $backend in
reference) ref=${GPU_ENGINE_IMAGE_REF:-rekindle.local/gpu-engine:latest} ;;
transformers) ref=${GPU_ENGINE_IMAGE_REF:-rekindle.local/hf-engine:latest} ;;
vllm) ref=${GPU_ENGINE_IMAGE_REF:-rekindle.local/vllm-engine:latest} ;;
sglang) ref=${GPU_ENGINE_IMAGE_REF:-rekindle.local/sglang-engine:latest} ;;
*) die "GPU_ENGINE_BACKEND=$backend: want reference, transformers, vllm or sglang" ;;
esac
tag=${ref##*:}
gb=${GPU_ENGINE_PARAMS_GB:-1}
need_pkgs umoci busybox-static
need_tool umoci python3 tar

work=$(dirname "$out")/work/gpu-engine-$backend
rm -rf "$work"
root=$work/root
mkdir -p "$work" "$root"/{bin,etc,engine,weights,rekindle/weights,tmp,root,proc,sys,dev,usr/bin,host}
chmod 1777 "$root/tmp"
install -m 0755 /bin/busybox "$root/bin/busybox"
for a in $("$root/bin/busybox" --list); do
	[ "$a" = busybox ] || ln -s busybox "$root/bin/$a"
done
printf 'root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/nonexistent:/bin/false\n' >"$root/etc/passwd"
printf 'root:x:0:\nnogroup:x:65534:\n' >"$root/etc/group"
for f in server.py launch.sh host-python.sh; do
	install -m 0755 "$here/$f" "$root/engine/$f"
done
install -m 0644 "$here/hf_model.py" "$root/engine/hf_model.py"
# The HTTP side both engines share (images/engine_http.py): server.py imports it from beside itself.
install -m 0644 "$here/../engine_http.py" "$root/engine/engine_http.py"
extra_env=()
profile=sglang port=30000
desc="GPU engine, $backend backend (PyTorch transformer, SGLang memory API); runs the host's Python+PyTorch"
if [ "$backend" != reference ]; then
	install -m 0755 "$here/cc" "$root/engine/cc"
	ln -s cc "$root/engine/c++"
	mkdir -p "$root/lib64" "$root/var/cache/engine"
	ln -s /host/usr/lib/x86_64-linux-gnu/ld-linux-x86-64.so.2 "$root/lib64/ld-linux-x86-64.so.2"
	# The host's libc.so linker script names /lib/... and /lib64/ld-linux...:
	# under --sysroot=/host they must resolve inside the bound /host/usr.
	ln -s usr/lib "$root/host/lib"
	mkdir -p "$root/host/lib64"
	ln -s /host/usr/lib/x86_64-linux-gnu/ld-linux-x86-64.so.2 "$root/host/lib64/ld-linux-x86-64.so.2"
	# The host's tools last on PATH: inductor and triton run a few (ptxas
	# comes with triton; openssl, on a CPU, hashes headers).
	extra_env=(--config.env PATH=/bin:/usr/bin:/host/usr/bin
		--config.env ENGINE_BACKEND=$backend --config.env ENGINE_EXPORT_LIBRARY_PATH=1
		--config.env CC=/engine/cc --config.env CXX=/engine/c++
		--config.env TORCHINDUCTOR_CACHE_DIR=/var/cache/engine/inductor
		--config.env TRITON_CACHE_DIR=/var/cache/engine/triton)
fi
if [ "$backend" = vllm ]; then
	# vLLM from the host, the model bound at /models/model (integrations/vllm/serve.py).
	# Dev mode serves /sleep, /wake_up and /server_info for the checkpoint;
	# no flashinfer is assumed; vLLM's rendezvous on loopback; no usage
	# reports; its compile cache in the container, as inductor's.
	install -m 0755 "$here/../../integrations/vllm/serve.py" "$root/engine/vllm_serve.py"
	# The weight set loader, a vLLM plugin found by its entry point.
	install -m 0644 -t "$root/engine" "$here/../../integrations/vllm/rekindle_vllm.py" "$here/../../integrations/vllm/rekindle_heap.py"
	install -D -m 0644 -t "$root/engine/rekindle_vllm-1.0.dist-info" "$here/../../integrations/vllm/rekindle_vllm-1.0.dist-info/"*
	mkdir -p "$root/models/model"
	profile=vllm port=8000
	desc="vLLM's OpenAI API server on the model bound at /models/model; runs the host's Python, PyTorch and vLLM"
	extra_env+=(--config.env ENGINE_SERVER=/engine/vllm_serve.py
		--config.env ENGINE_MEMORY_SAVER=0 --config.env MODEL_PATH=/models/model
		--config.env VLLM_SERVER_DEV_MODE=1 --config.env VLLM_USE_FLASHINFER_SAMPLER=0
		--config.env VLLM_HOST_IP=127.0.0.1 --config.env VLLM_NO_USAGE_STATS=1 --config.env DO_NOT_TRACK=1
		--config.env VLLM_CACHE_ROOT=/var/cache/engine/vllm --config.env HOME=/root)
fi
if [ "$backend" = sglang ]; then
	# SGLang from the host, the model bound at /models/model
	# (integrations/sglang/serve.py), its memory saver on: launch.sh
	# preloads torch_memory_saver's hook, as SGLang's schedulers want it.
	install -m 0755 "$here/../../integrations/sglang/serve.py" "$root/engine/sglang_serve.py"
	# The weight set loader, an SGLang plugin found by its entry point.
	install -m 0644 "$here/../../integrations/sglang/rekindle_sglang.py" "$root/engine/rekindle_sglang.py"
	install -D -m 0644 -t "$root/engine/rekindle_sglang-1.0.dist-info" "$here/../../integrations/sglang/rekindle_sglang-1.0.dist-info/"*
	mkdir -p "$root/models/model"
	desc="SGLang's server on the model bound at /models/model; runs the host's Python, PyTorch and SGLang"
	# Kernels that need nothing the container lacks (no FA3 in the site
	# wheels.sh makes, no nvcc for flashinfer's sampling), unless
	# ENGINE_SGLANG_ARGS chooses.
	extra_env+=(--config.env ENGINE_SERVER=/engine/sglang_serve.py --config.env MODEL_PATH=/models/model
		--config.env HOME=/root
		--config.env "ENGINE_SGLANG_DEFAULTS=--attention-backend triton --sampling-backend pytorch")
fi
# The weight set client (integrations/weights/): server.py imports it from beside itself.
install -m 0644 -t "$root/engine" "$here/../../integrations/weights/rekindle_weights.py" \
	"$here/../../integrations/weights/rekindle_model_set.py"
find "$root" -exec touch -h -d "@$SOURCE_DATE_EPOCH" {} +
layer_tar "$root" "$work/layer.tar"

created=$(image_created)
layout=$work/layout
umoci init --layout "$layout"
umoci new --image "$layout:$tag"
# Checkpoint-friendly settings ride in the environment: no io_uring in uvloop,
# gloo on loopback, one inductor compile thread, no hub access, and no .pyc
# writes into the read-only host Python.
umoci raw add-layer --image "$layout:$tag" --history.created "$created" \
	--history.created_by "rekindle images/gpu-engine ($backend): busybox, server.py, engine_http.py, hf_model.py, launch.sh, host-python.sh, rekindle_weights.py" "$work/layer.tar"
umoci config --image "$layout:$tag" --created "$created" --history.created "$created" \
	--history.created_by "rekindle images/gpu-engine/build.sh" \
	--config.env PATH=/bin:/usr/bin \
	--config.env ENGINE_PORT=$port --config.env ENGINE_HOST=0.0.0.0 \
	--config.env ENGINE_WEIGHTS_DIR=/weights --config.env "ENGINE_PARAMS_GB=$gb" \
	--config.env PYTHONUNBUFFERED=1 --config.env PYTHONDONTWRITEBYTECODE=1 \
	--config.env UV_USE_IO_URING=0 --config.env GLOO_SOCKET_IFNAME=lo \
	--config.env TORCHINDUCTOR_COMPILE_THREADS=1 --config.env HF_HUB_OFFLINE=1 "${extra_env[@]}" \
	--clear config.cmd --config.cmd /engine/launch.sh \
	--config.workingdir /engine --config.exposedports $port/tcp --config.stopsignal SIGTERM \
	--config.label "org.opencontainers.image.title=rekindle ${ref##*/}" \
	--config.label "org.opencontainers.image.description=$desc" \
	--config.label "org.rekindle.engine.profile=$profile" \
	--config.label "org.rekindle.engine.params-gb=$gb"
oci_pack "$layout" "$tag" "$ref" "$out"
rm -rf "$work/layer.tar" "$root"
note "wrote $out ($(du -h "$out" | cut -f1)) as $ref"
