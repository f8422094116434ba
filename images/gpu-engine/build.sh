#!/usr/bin/env bash
# build.sh BASE.tar OUT.tar: the GPU reference engine image, one layer on the
# base image: /engine/{server.py,launch.sh,host-python.sh} and an empty
# /weights mount point. No PyTorch inside: the container runs the GPU host's
# Python and PyTorch, bound in at run time (see README.md, host-python.sh), so
# the image builds here without torch, a GPU or network beyond the base image.
# Named rekindle.local/gpu-engine:latest.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
. "$here/../lib.sh"
[ $# -eq 2 ] || die "usage: $0 BASE.tar OUT.tar"
base=$(realpath "$1") || die "no base image archive $1: build it first (make images)"
out=$(realpath -m "$2")
ref=${GPU_ENGINE_IMAGE_REF:-rekindle.local/gpu-engine:latest}
tag=${ref##*:}
base_ref=${BASE_IMAGE_REF:-rekindle.local/base:bookworm}
gb=${GPU_ENGINE_PARAMS_GB:-1}
need_pkgs umoci
need_tool umoci python3 tar

work=$(dirname "$out")/work/gpu-engine
rm -rf "$work"
mkdir -p "$work/layout" "$work/root/engine" "$work/root/weights"
for f in server.py launch.sh host-python.sh; do
	install -m 0755 "$here/$f" "$work/root/engine/$f"
done
layer_tar "$work/root" "$work/layer.tar"

tar -C "$work/layout" -xf "$base"
base_tag=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["manifests"][0]["annotations"]["org.opencontainers.image.ref.name"])' "$work/layout/index.json") ||
	die "$base is not an OCI image archive with a tagged manifest"
base_digest=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["manifests"][0]["digest"])' "$work/layout/index.json")
created=$(image_created)
layout=$work/layout

# Checkpoint-friendly settings ride in the environment: no io_uring in uvloop,
# gloo on loopback, one inductor compile thread, no hub access, and no .pyc
# writes into the read-only host Python.
umoci raw add-layer --image "$layout:$base_tag" --tag "$tag" --history.created "$created" \
	--history.created_by "rekindle images/gpu-engine: server.py, launch.sh, host-python.sh" "$work/layer.tar"
umoci config --image "$layout:$tag" --created "$created" --history.created "$created" \
	--history.created_by "rekindle images/gpu-engine/build.sh" \
	--config.env ENGINE_PORT=30000 --config.env ENGINE_HOST=0.0.0.0 \
	--config.env ENGINE_WEIGHTS_DIR=/weights --config.env "ENGINE_PARAMS_GB=$gb" \
	--config.env PYTHONUNBUFFERED=1 --config.env PYTHONDONTWRITEBYTECODE=1 \
	--config.env UV_USE_IO_URING=0 --config.env GLOO_SOCKET_IFNAME=lo \
	--config.env TORCHINDUCTOR_COMPILE_THREADS=1 --config.env HF_HUB_OFFLINE=1 \
	--clear config.cmd --config.cmd /engine/launch.sh \
	--config.workingdir /engine --config.exposedports 30000/tcp --config.stopsignal SIGTERM \
	--config.label "org.opencontainers.image.title=rekindle gpu-engine" \
	--config.label "org.opencontainers.image.description=GPU reference engine (PyTorch transformer, SGLang memory API); runs the host's Python+PyTorch" \
	--config.label "org.rekindle.engine.profile=sglang" \
	--config.label "org.rekindle.engine.params-gb=$gb" \
	--manifest.annotation "org.opencontainers.image.base.name=$base_ref" \
	--manifest.annotation "org.opencontainers.image.base.digest=$base_digest"
umoci rm --image "$layout:$base_tag"
oci_pack "$layout" "$tag" "$ref" "$out"
rm -rf "$work/layer.tar" "$work/root"
note "wrote $out ($(du -h "$out" | cut -f1)) as $ref"
