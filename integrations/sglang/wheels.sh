#!/usr/bin/env bash
# wheels.sh DIR: SGLang 0.5.17 for a GPU host without network, as a folder
# `pip install --target` would make. SGLang 0.5.17 is the newest release that
# pins the GPU hosts' torch (2.11.0); the host image already has torch,
# triton, numpy, requests, aiohttp, psutil, safetensors, ... and this fetches
# the 87 wheels beyond them that a served text model imports (the list beside
# this script: CPython 3.12, x86-64, each --no-deps, exact versions; SGLang's
# pins where it has them: transformers 5.12.1 and its tokenizers, openai
# 2.6.1, xgrammar 0.2.1).
#
#   DIR/whl/        the wheels
#   DIR/site/       them installed (pip install --target), without
#                   sgl_kernel/flash_ops.abi3.so unless SGLANG_FA3=1: FA3's
#                   kernels are 1.1 GB of the 1.2 GB sglang-kernel, and the
#                   sglang-engine image runs --attention-backend triton
#   DIR/parts/pN/   DIR/site as sglang-site.tar.xz in 56 MB pieces, one a
#                   folder, with sglang-site.sha256 in the last
#
# On the GPU host (the folder images/README.md's SGLang engine binds):
#   cat sglang-site.tar.xz.* >sglang-site.tar.xz && sha256sum -c sglang-site.sha256
#   mkdir -p /var/tmp/sglang-site && tar -xJf sglang-site.tar.xz -C /var/tmp/sglang-site
# A host with network needs none of this: pip install --target /var/tmp/sglang-site sglang==0.5.17
# Either way, then build on the host what SGLang compiles at run time:
#   integrations/sglang/prebuild-kernels.sh /var/tmp/sglang-site MODEL
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
dir=$(realpath -m "${1:?usage: $0 DIR}")
mkdir -p "$dir/whl"
plat=(--implementation cp --abi cp312 --abi abi3 --abi none --python-version 3.12 --only-binary=:all:)
for n in 35 34 31 28 27 26 24 17 5; do plat+=(--platform "manylinux_2_${n}_x86_64"); done
plat+=(--platform manylinux2014_x86_64 --platform manylinux1_x86_64 --platform any)
want=()
while read -r w; do
	[ -n "$w" ] || continue
	want+=("$dir/whl/$w")
	[ -f "$dir/whl/$w" ] && continue
	name=${w%%-[0-9]*}; rest=${w#"$name"-}; ver=${rest%%-*}
	python3 -m pip download -q --no-deps "${plat[@]}" -d "$dir/whl" "${name//_/-}==$ver"
	[ -f "$dir/whl/$w" ] || { echo "wheels.sh: pip fetched no $w" >&2; exit 1; }
done <"$here/sglang-0.5.17-wheels.txt"

rm -rf "$dir/site" "$dir/parts"
mkdir -p "$dir/site" "$dir/parts"
python3 -m pip install -q --no-deps --no-compile "${plat[@]}" --target "$dir/site" "${want[@]}"
[ "${SGLANG_FA3:-0}" = 1 ] || rm -f "$dir/site/sgl_kernel/flash_ops.abi3.so"
tar -C "$dir/site" --sort=name --owner=0 --group=0 --numeric-owner --mtime=@0 -cf - . |
	xz -T0 -6 >"$dir/sglang-site.tar.xz"
(cd "$dir/parts" && split -b 56m -d "$dir/sglang-site.tar.xz" sglang-site.tar.xz.)
i=0
for p in "$dir/parts"/sglang-site.tar.xz.*; do
	mkdir -p "$dir/parts/p$i" && mv "$p" "$dir/parts/p$i/" && last=p$i && i=$((i + 1))
done
(cd "$dir" && sha256sum sglang-site.tar.xz) >"$dir/parts/$last/sglang-site.sha256"
du -sh "$dir/site" "$dir/parts"/p*
