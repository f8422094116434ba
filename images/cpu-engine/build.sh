#!/usr/bin/env bash
# build.sh BASE.tar OUT.tar: the CPU reference engine image, one layer on the
# base image: /engine/server.py, the HTTP side it shares with the GPU engine
# (/engine/engine_http.py, images/engine_http.py) and ENGINE_WEIGHTS_MB MiB of
# seeded weights (/engine/weights.bin + .sha256). Named
# rekindle.local/cpu-engine:latest.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
. "$here/../lib.sh"
[ $# -eq 2 ] || die "usage: $0 BASE.tar OUT.tar"
base=$(realpath "$1") || die "no base image archive $1: build it first (make images)"
out=$(realpath -m "$2")
mb=${ENGINE_WEIGHTS_MB:-64}
ref=${CPU_ENGINE_IMAGE_REF:-rekindle.local/cpu-engine:latest}
tag=${ref##*:}
base_ref=${BASE_IMAGE_REF:-rekindle.local/base:bookworm}
need_pkgs umoci
need_tool umoci python3 tar

work=$(dirname "$out")/work/cpu-engine
rm -rf "$work"
mkdir -p "$work/layout" "$work/root/engine"

note "weights: $mb MiB from a fixed seed"
install -m 0755 "$here/server.py" "$work/root/engine/server.py"
install -m 0644 "$here/../engine_http.py" "$work/root/engine/engine_http.py"
python3 "$here/server.py" make-weights "$work/root/engine/weights.bin" "$mb" >/dev/null
layer_tar "$work/root" "$work/layer.tar"

tar -C "$work/layout" -xf "$base"
base_tag=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["manifests"][0]["annotations"]["org.opencontainers.image.ref.name"])' "$work/layout/index.json") ||
	die "$base is not an OCI image archive with a tagged manifest"
base_digest=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["manifests"][0]["digest"])' "$work/layout/index.json")
created=$(image_created)
layout=$work/layout

umoci raw add-layer --image "$layout:$base_tag" --tag "$tag" --history.created "$created" \
	--history.created_by "rekindle images/cpu-engine: server.py, engine_http.py + weights ($mb MiB)" "$work/layer.tar"
umoci config --image "$layout:$tag" --created "$created" --history.created "$created" \
	--history.created_by "rekindle images/cpu-engine/build.sh" \
	--config.env ENGINE_PORT=30000 --config.env ENGINE_WEIGHTS=/engine/weights.bin \
	--config.env ENGINE_STATE_MB=0 --config.env PYTHONUNBUFFERED=1 --config.env PYTHONDONTWRITEBYTECODE=1 \
	--clear config.cmd --config.cmd python3 --config.cmd -u --config.cmd /engine/server.py \
	--config.workingdir /engine --config.exposedports 30000/tcp --config.stopsignal SIGTERM \
	--config.label "org.opencontainers.image.title=rekindle cpu-engine" \
	--config.label "org.opencontainers.image.description=CPU reference engine with SGLang's memory API" \
	--config.label "org.rekindle.engine.profile=sglang" \
	--config.label "org.rekindle.engine.weights-mb=$mb" \
	--manifest.annotation "org.opencontainers.image.base.name=$base_ref" \
	--manifest.annotation "org.opencontainers.image.base.digest=$base_digest"
umoci rm --image "$layout:$base_tag"
oci_pack "$layout" "$tag" "$ref" "$out"
rm -rf "$work/layer.tar" "$work/root"
note "wrote $out ($(du -h "$out" | cut -f1)) as $ref"
