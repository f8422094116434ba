#!/usr/bin/env bash
# nerdctl.sh DIR ARGS...: nerdctl against the containerd that containerd-up.sh
# started on DIR, with its own data root there. The CNI network configuration
# stays nerdctl's default (/etc/cni/net.d): every run on a host shares the one
# default bridge and its address pool, as nerdctl does outside tests.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
dir=$(realpath -m "$1"); shift
bin=${REKINDLE_BIN:-$(dirname "$here")/build/bin}
exec env PATH="$bin:$PATH" "$bin/nerdctl" --address "$dir/containerd.sock" \
	--data-root "$dir/nerdctl" --cni-path "$bin/cni" "$@"
