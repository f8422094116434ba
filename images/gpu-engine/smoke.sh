#!/usr/bin/env bash
# smoke.sh [OUT]: the GPU engine on a GPU host, without containerd.
#
#  1. writes the weights file (server.py make-weights) unless it exists, and
#     drops the page cache so the cold start reads it from disk;
#  2. starts server.py with the host's python3 (ENGINE_PARAMS_GB, default 8):
#     cold-start phases, /generate, release (GPU memory must drop), resume,
#     /generate again (must be identical), phases of each;
#  3. with SMOKE_IMAGE=gpu-engine.tar: unpacks the image into a rootfs, binds
#     what host-python.sh names (/usr at /host/usr, the venv, site folders) and
#     the driver, and runs the image's /engine/launch.sh in a chroot: the
#     container's view of files, without containerd (SMOKE_IMAGE_GB, default 1).
#
# Logs and summary.json go to OUT (default $OUT or /tmp/gpu-engine-smoke).
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
out=$(realpath -m "${1:-${OUT:-/tmp/gpu-engine-smoke}}")
py=${PYTHON:-python3}
mkdir -p "$out"
export ENGINE_PARAMS_GB=${ENGINE_PARAMS_GB:-8} ENGINE_WEIGHTS_DIR=${ENGINE_WEIGHTS_DIR:-/var/tmp/rekindle-weights}
export PYTHONUNBUFFERED=1
port=${SMOKE_PORT:-30000}
summary=$out/summary.json
echo '{}' >"$summary"
PROMPT='{"text": "Rekindle restores warm GPU engines in seconds.", "sampling_params": {"max_new_tokens": 32}}'

note() { echo "== $*"; }
# put KEY JSON: record a value in summary.json
put() { "$py" -c 'import json,sys; p=sys.argv[1]; d=json.load(open(p)); d[sys.argv[2]]=json.loads(sys.argv[3]); json.dump(d,open(p,"w"),indent=1)' "$summary" "$1" "$2"; }
# req METHOD PORT PATH [BODY]: one HTTP call, prints the JSON answer (even on an error status)
req() {
	"$py" - "$@" <<'PY'
import json, sys, urllib.request, urllib.error
m, port, path = sys.argv[1:4]
body = sys.argv[4].encode() if len(sys.argv) > 4 else (b"{}" if m == "POST" else None)
r = urllib.request.Request(f"http://127.0.0.1:{port}{path}", data=body, method=m,
                           headers={"Content-Type": "application/json"})
try:
    with urllib.request.urlopen(r, timeout=600) as f:
        print(f.read().decode().strip())
except urllib.error.HTTPError as e:
    print(e.read().decode().strip()); sys.exit(1)
PY
}
wait_healthy() { # PORT PID SECS
	local i
	for ((i = 0; i < $3 * 2; i++)); do
		req GET "$1" /health >/dev/null 2>&1 && return 0
		kill -0 "$2" 2>/dev/null || return 1
		sleep 0.5
	done
	return 1
}
smi() { nvidia-smi --query-gpu=index,uuid,memory.used,memory.total --format=csv,noheader; nvidia-smi --query-compute-apps=pid,used_memory --format=csv,noheader; }
field() { "$py" -c 'import json,sys; d=json.loads(sys.argv[1])
for k in sys.argv[2].split("."): d=d[k]
print(json.dumps(d))' "$1" "$2"; }

# exercise NAME PORT: generate, release, resume, generate; record it all.
exercise() {
	local name=$1 p=$2 s a b r u
	s=$(req GET "$p" /state) && put "$name.state_at_start" "$s"
	a=$(req POST "$p" /generate "$PROMPT") || { echo "generate failed: $a"; return 1; }
	put "$name.generate_before" "$a"
	smi | tee "$out/$name-smi-loaded.txt"
	r=$(req POST "$p" /release_memory_occupation '{}') || { echo "release failed: $r"; return 1; }
	put "$name.release" "$r"
	u=$(req GET "$p" /state) && put "$name.state_released" "$u"
	smi | tee "$out/$name-smi-released.txt"
	req GET "$p" /health && { echo "health is 200 while released"; return 1; }
	r=$(req POST "$p" /resume_memory_occupation '{}') || { echo "resume failed: $r"; return 1; }
	put "$name.resume" "$r"
	smi | tee "$out/$name-smi-resumed.txt"
	b=$(req POST "$p" /generate "$PROMPT") || { echo "generate after resume failed: $b"; return 1; }
	put "$name.generate_after" "$b"
	s=$(req GET "$p" /state) && put "$name.state_end" "$s"
	local ta tb
	ta=$(field "$a" output_ids) tb=$(field "$b" output_ids)
	note "$name: release $(field "$r" time_s 2>/dev/null)s; tokens before: $ta"
	note "$name: tokens after:  $tb"
	if [ "$ta" = "$tb" ]; then put "$name.identical" true; note "$name: IDENTICAL"; else put "$name.identical" false; note "$name: DIFFERENT"; return 1; fi
}

note "host"
{
	nvidia-smi --query-gpu=index,name,uuid,driver_version,memory.total --format=csv
	uname -r
	echo "python3: $(command -v "$py") -> $(readlink -f "$(command -v "$py")")"
	"$py" -c 'import sys, sysconfig; print("prefix", sys.prefix, "base_prefix", sys.base_prefix, "exe", sys.executable, "LIBDIR", sysconfig.get_config_var("LIBDIR"))'
	cat "$("$py" -c 'import sys; print(sys.prefix)')/pyvenv.cfg" 2>/dev/null
	"$py" -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda)'
	base=$(readlink -f "$(command -v "$py")")
	echo "GLIBC needed by $base: $(grep -ao 'GLIBC_2\.[0-9]*' "$base" | sort -uV | tail -1); host glibc: $(ldd --version | head -1)"
	findmnt -rn -o TARGET,FSTYPE,OPTIONS | grep -E '^/(usr|opt|lib|etc)' || true
	"$here/host-python.sh" "$py"
} 2>&1 | tee "$out/host.txt"

note "weights ($ENGINE_PARAMS_GB GB)"
wfile=$("$py" "$here/server.py" config | "$py" -c 'import json,sys; print(json.load(sys.stdin)["weights_path"])')
if [ ! -f "$wfile" ]; then
	w=$("$py" "$here/server.py" make-weights 2>&1 | tee "$out/make-weights.log" | tail -1)
	put make_weights "$w" || echo "make-weights: $w"
fi
ls -la "$wfile"
sync
echo 3 >/proc/sys/vm/drop_caches 2>/dev/null && put page_cache_dropped true || put page_cache_dropped false

note "direct: server.py on the host python, ${ENGINE_PARAMS_GB} GB"
t0=$EPOCHREALTIME
ENGINE_PORT=$port "$py" "$here/server.py" >"$out/direct.log" 2>&1 &
pid=$!
if wait_healthy "$port" "$pid" 900; then
	put direct.healthy_after_s "$(awk -v a="$t0" -v b="$EPOCHREALTIME" 'BEGIN { printf "%.2f", b - a }')"
	if exercise direct "$port"; then put direct.ok true; else put direct.ok false; fi
else
	put direct.ok false
	tail -30 "$out/direct.log"
fi
kill "$pid" 2>/dev/null
wait "$pid" 2>/dev/null
grep -E 'cold start|ready on|release|resume' "$out/direct.log" | tail -8

[ -n "${SMOKE_IMAGE:-}" ] || exit 0
note "chroot: the image's launch.sh with the host Python bound in"
root=/tmp/gpu-engine-rootfs
rm -rf "$root" "$root.oci"
mkdir -p "$root" "$root.oci"
tar -C "$root.oci" -xf "$SMOKE_IMAGE"
"$py" - "$root.oci" "$root" <<'PY'
import json, os, sys, tarfile
lay, root = sys.argv[1:]
blob = lambda d: os.path.join(lay, "blobs", *d.split(":"))
man = json.load(open(blob(json.load(open(os.path.join(lay, "index.json")))["manifests"][0]["digest"])))
for l in man["layers"]:
    with tarfile.open(blob(l["digest"])) as t:
        t.extractall(root, filter="fully_trusted") if hasattr(tarfile, "data_filter") else t.extractall(root)
cfg = json.load(open(blob(man["config"]["digest"])))["config"]
open(os.path.join(root, ".image-env"), "w").write("\n".join(cfg.get("Env", [])) + "\n")
PY
mapfile -t flags < <("$here/host-python.sh" "$py")
printf '%s\n' "${flags[@]}" >"$out/chroot-flags.txt"
mounts=()
bindro() { # SRC DST
	mkdir -p "$root$2" && mount --bind "$1" "$root$2" && mount -o remount,bind,ro "$root$2" && mounts+=("$root$2")
}
envs=()
for f in "${flags[@]}"; do
	case "$f" in
	--volume=*) v=${f#--volume=}; IFS=: read -r src dst _ <<<"$v"; bindro "$src" "$dst" ;;
	--env=*) envs+=("${f#--env=}") ;;
	esac
done
mkdir -p "$root/dev" "$root/proc" "$root/sys" "$root/tmp" "$root/weights"
mount --rbind /dev "$root/dev" && mounts+=("$root/dev")
mount -t proc proc "$root/proc" && mounts+=("$root/proc")
mount --rbind /sys "$root/sys" && mounts+=("$root/sys")
# What CDI would add: the driver's libraries (here: its whole folder).
[ -d /usr/local/nvidia ] && bindro /usr/local/nvidia /usr/local/nvidia
mkdir -p /var/tmp/rekindle-weights-chroot
mount --bind /var/tmp/rekindle-weights-chroot "$root/weights" && mounts+=("$root/weights")
cport=$((port + 1))
mapfile -t ienv <"$root/.image-env"
env -i "${ienv[@]}" "${envs[@]}" ENGINE_PORT=$cport ENGINE_PARAMS_GB="${SMOKE_IMAGE_GB:-1}" \
	chroot "$root" /engine/launch.sh >"$out/chroot.log" 2>&1 &
cpid=$!
if wait_healthy "$cport" "$cpid" 600; then
	if exercise chroot "$cport"; then put chroot.ok true; else put chroot.ok false; fi
else
	put chroot.ok false
	tail -30 "$out/chroot.log"
fi
kill "$cpid" 2>/dev/null
wait "$cpid" 2>/dev/null
for ((i = ${#mounts[@]} - 1; i >= 0; i--)); do umount -l "${mounts[i]}" 2>/dev/null; done
grep -E 'cold start|ready on|python' "$out/chroot.log" | tail -4
