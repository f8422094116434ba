#!/usr/bin/env bash
# stock-compare.sh [DIR]: a one-off comparison, run by hand (not part of
# `make test` or any default target): what does *stock* containerd (the
# pinned release without containerd-patches/) do with
# `nerdctl run CHECKPOINT-IMAGE`, the restore that the patched containerd
# does?
#
# 1. builds stock containerd and its runc shim from the pinned module into
#    build/stock/bin, with the Makefile's build tags (once; delete
#    build/stock to rebuild); ctr, runc, criu and nerdctl are the stack's
#    own, linked from build/bin;
# 2. starts the patched containerd on DIR/patched, runs the CPU engine,
#    makes a checkpoint image of it with `oci-checkpoint create`, and saves
#    the image as an OCI archive;
# 3. starts stock containerd on DIR/stock (REKINDLE_BIN=build/stock/bin),
#    loads the base and engine images and the archive, and runs
#    `nerdctl run -d CHECKPOINT-IMAGE`, as 300-restore.bats's first test does;
# 4. prints what it did: nerdctl's exit status and output, the container's
#    state and log, and whether the engine answers with the checkpointed
#    process (same start_time) or a fresh one.
# DIR defaults to /tmp/rekindle-stock-compare; both containerds are stopped
# and DIR removed at the end. Needs root and a built stack (make build).
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
. "$root/scripts/lib.sh"
need_root
cd "$root"
. <(sed -n 's/^\(CONTAINERD_[A-Z]*\|GO_VERSION\) *:= *\(.*\)$/\1="\2"/p' versions.mk)
dir=$(realpath -m "${1:-/tmp/rekindle-stock-compare}")
bin=$root/build/bin
stock=$root/build/stock
tags="urfave_cli_no_docs no_btrfs"
port=$("$root/scripts/free-ports.py")
image=rekindle.local/ckpt:stock-compare

# 1. stock containerd
if [ ! -x "$stock/bin/containerd" ]; then
	scripts/fetch-module.sh "$CONTAINERD_MODULE" "$CONTAINERD_VERSION" "$CONTAINERD_SUM" "$stock/src" || exit 1
	(cd "$stock/src" && GOTOOLCHAIN=go$GO_VERSION GOFLAGS=-mod=mod go build -trimpath -tags "$tags" \
		-ldflags "-X github.com/containerd/containerd/v2/version.Version=${CONTAINERD_VERSION#v}" \
		-o "$stock/bin/" ./cmd/containerd ./cmd/containerd-shim-runc-v2) || die "building stock containerd failed"
fi
for t in ctr runc criu nerdctl cni; do ln -sfn "$bin/$t" "$stock/bin/$t"; done
grep -q "checkpoint cache hit" "$stock/bin/containerd" && die "$stock/bin/containerd has the patches"

cleanup() {
	scripts/containerd-down.sh "$dir/patched" >/dev/null 2>&1
	REKINDLE_BIN=$stock/bin scripts/containerd-down.sh "$dir/stock" >/dev/null 2>&1
	rm -rf "$dir"
}
trap cleanup EXIT
cleanup
mkdir -p "$dir"

# 2. the checkpoint image, made with the patched stack
scripts/containerd-up.sh "$dir/patched" || exit 1
pn() { scripts/nerdctl.sh "$dir/patched" "$@"; }
pn load -i build/images/base.tar >/dev/null && pn load -i build/images/cpu-engine.tar >/dev/null || exit 1
pn run -d --name src -p "127.0.0.1:$port:30000" rekindle.local/cpu-engine:latest >/dev/null || exit 1
for _ in $(seq 100); do curl -fs "http://127.0.0.1:$port/health" >/dev/null && break; sleep 0.2; done
start0=$(curl -fsS "http://127.0.0.1:$port/state" | jq -r .start_time)
CONTAINERD_ADDRESS=$dir/patched/containerd.sock "$bin/oci-checkpoint" create src "$image" || exit 1
pn save -o "$dir/ckpt.tar" "$image" || exit 1
scripts/containerd-down.sh "$dir/patched" >/dev/null 2>&1

# 3. stock containerd restores it?
export REKINDLE_BIN=$stock/bin
scripts/containerd-up.sh "$dir/stock" || exit 1
sn() { scripts/nerdctl.sh "$dir/stock" "$@"; }
for a in build/images/base.tar build/images/cpu-engine.tar "$dir/ckpt.tar"; do sn load -i "$a" >/dev/null || exit 1; done
note "stock containerd $("$stock/bin/containerd" --version | awk '{print $3}'): nerdctl run -d -p 127.0.0.1:$port:30000 $image"
out=$(sn run -d --name dst -p "127.0.0.1:$port:30000" "$image" 2>&1)
rc=$?
echo "nerdctl run exit status: $rc"
echo "nerdctl run output:"
printf '%s\n' "$out" | sed 's/^/  /'
sleep 3

# 4. what became of it
echo "container state: $(sn inspect -f '{{.State.Status}} (exit code {{.State.ExitCode}}, error: {{.State.Error}})' dst 2>&1)"
echo "container log:"
sn logs dst 2>&1 | tail -5 | sed 's/^/  /'
if state=$(curl -fsS --max-time 5 "http://127.0.0.1:$port/state" 2>/dev/null); then
	start1=$(jq -r .start_time <<<"$state")
	if [ "$start1" = "$start0" ]; then
		echo "engine: answers as the checkpointed process (start_time $start1): restored"
	else
		echo "engine: answers as a fresh process (start_time $start1, checkpointed one $start0): started anew, not restored"
	fi
else
	echo "engine: does not answer on 127.0.0.1:$port"
fi
echo "stock containerd's log on this container:"
grep -v 'level=debug' "$dir/stock/containerd.log" | grep -iE 'error|checkpoint|restor' | grep -vE 'cgroup v1|skip loading plugin' | tail -5 | cut -c1-400 | sed 's/^/  /'
