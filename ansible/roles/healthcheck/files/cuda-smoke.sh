#!/usr/bin/env bash
# cuda-smoke.sh PREFIX: checkpoint and restore a tiny CUDA process with the
# stack installed under PREFIX. The process (CUDA driver API through
# dlopen, so no CUDA toolkit is needed) fills 64 MiB on GPU 0 with a pattern
# and writes a heartbeat "COUNT SUM" five times a second, SUM being read back
# from the GPU. It is then
#   1. checkpointed and restored in place by PREFIX/bin/cuda-checkpoint --toggle;
#   2. dumped and restored by PREFIX/bin/criu, whose CUDA plugin runs
#      cuda-checkpoint from PATH (PREFIX/bin first, as in containerd's unit).
# After each, the heartbeat must go on with the pattern intact.
set -euo pipefail
prefix=${1:?usage: $0 PREFIX}
export PATH=$prefix/bin:$PATH
for t in criu cuda-checkpoint; do
	[ -x "$prefix/bin/$t" ] || { echo "FAIL: $prefix/bin/$t is missing" >&2; exit 1; }
done
cc=$(command -v cc || command -v gcc) || { echo "FAIL: no C compiler for the CUDA test program" >&2; exit 1; }
w=$(mktemp -d "${TMPDIR:-/tmp}/rekindle-cuda-smoke.XXXXXX")
pid=''
cleanup() {
	[ -z "$pid" ] || kill -KILL "$pid" 2>/dev/null || true
	rm -rf "$w"
}
trap cleanup EXIT

cat >"$w/hold.c" <<'C'
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

typedef int (*fn_init)(unsigned);
typedef int (*fn_dev)(int *, int);
typedef int (*fn_retain)(void **, int);
typedef int (*fn_ctx)(void *);
typedef int (*fn_alloc)(unsigned long long *, size_t);
typedef int (*fn_memset)(unsigned long long, unsigned, size_t);
typedef int (*fn_dtoh)(void *, unsigned long long, size_t);

#define WORDS (16u << 20) /* 64 MiB of 32-bit words */
#define PATTERN 7u

static void *sym(void *lib, const char *name) {
	void *p = dlsym(lib, name);
	if (!p) { fprintf(stderr, "missing %s\n", name); exit(1); }
	return p;
}

int main(int argc, char **argv) {
	void *lib = dlopen("libcuda.so.1", RTLD_NOW);
	if (!lib || argc != 2) { fprintf(stderr, "usage: hold HEARTBEAT (needs libcuda.so.1)\n"); return 1; }
	int dev; void *ctx; unsigned long long p;
	if (((fn_init)sym(lib, "cuInit"))(0) || ((fn_dev)sym(lib, "cuDeviceGet"))(&dev, 0) ||
	    ((fn_retain)sym(lib, "cuDevicePrimaryCtxRetain"))(&ctx, dev) || ((fn_ctx)sym(lib, "cuCtxSetCurrent"))(ctx) ||
	    ((fn_alloc)sym(lib, "cuMemAlloc_v2"))(&p, WORDS * 4ull) ||
	    ((fn_memset)sym(lib, "cuMemsetD32_v2"))(p, PATTERN, WORDS)) {
		fprintf(stderr, "CUDA setup failed\n");
		return 1;
	}
	fn_dtoh dtoh = (fn_dtoh)sym(lib, "cuMemcpyDtoH_v2");
	unsigned *buf = malloc(WORDS * 4ull);
	char tmp[4096];
	snprintf(tmp, sizeof tmp, "%s.tmp", argv[1]);
	for (unsigned long n = 1;; n++) {
		unsigned long long sum = 0;
		if (dtoh(buf, p, WORDS * 4ull)) { fprintf(stderr, "copy from GPU failed\n"); return 1; }
		for (unsigned i = 0; i < WORDS; i++) sum += buf[i];
		FILE *f = fopen(tmp, "w");
		if (!f) return 1;
		fprintf(f, "%lu %llu\n", n, sum);
		fclose(f);
		rename(tmp, argv[1]);
		usleep(200000);
	}
}
C
"$cc" -O2 -o "$w/hold" "$w/hold.c" -ldl
want=$((16 * 1024 * 1024 * 7))
hb=$w/heartbeat

count() { awk '{print $1}' "$hb" 2>/dev/null || echo 0; }
# alive STEP: the heartbeat moves on and the GPU pattern is intact.
alive() {
	local before after
	before=$(count)
	for _ in $(seq 50); do
		after=$(count)
		[ "$after" -gt "$before" ] && break
		sleep 0.2
	done
	[ "$after" -gt "$before" ] || { echo "FAIL: $1: no heartbeat after $before" >&2; exit 1; }
	[ "$(awk '{print $2}' "$hb")" = "$want" ] || { echo "FAIL: $1: GPU memory changed: $(cat "$hb"), want sum $want" >&2; exit 1; }
	echo "ok: $1 (heartbeat $before -> $after, GPU memory intact)"
}
now() { date +%s.%N; }
took() { awk -v a="$1" -v b="$(now)" 'BEGIN {printf "%.2fs", b - a}'; }

setsid "$w/hold" "$hb" </dev/null >"$w/hold.log" 2>&1 &
pid=$!
alive "CUDA process $pid started"

t=$(now)
cuda-checkpoint --toggle --pid "$pid"
[ "$(cuda-checkpoint --get-state --pid "$pid")" = checkpointed ] || { echo "FAIL: not checkpointed" >&2; exit 1; }
cuda-checkpoint --toggle --pid "$pid"
echo "ok: cuda-checkpoint --toggle twice in $(took "$t")"
alive "after cuda-checkpoint"

d=$w/images
mkdir -p "$d"
t=$(now)
criu dump -t "$pid" -D "$d" -o dump.log -v4 --libdir "$prefix/lib/criu" ||
	{ tail -20 "$d/dump.log" >&2; echo "FAIL: criu dump" >&2; exit 1; }
grep -q 'cuda_plugin' "$d/dump.log" || { echo "FAIL: CRIU's CUDA plugin did not run" >&2; exit 1; }
echo "ok: criu dump with the CUDA plugin in $(took "$t")"
t=$(now)
criu restore -D "$d" -o restore.log -v4 -d --libdir "$prefix/lib/criu" ||
	{ tail -20 "$d/restore.log" >&2; echo "FAIL: criu restore" >&2; exit 1; }
echo "ok: criu restore in $(took "$t")"
alive "after criu restore"
echo "PASS"
