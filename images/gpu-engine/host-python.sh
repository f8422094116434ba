#!/usr/bin/env bash
# host-python.sh [PYTHON]: on a GPU host, print the `nerdctl run` flags (one
# per line) that let the gpu-engine image run this host's Python + PyTorch
# (default: python3 on PATH, e.g. /opt/torch/.venv/bin/python3):
#
#   --volume=/usr:/host/usr:ro,bind      the host's /usr: base interpreter, its
#                                        stdlib and the C library it was built for
#   --volume=VENV:VENV:ro,bind           the venv (and any other site folder on the
#                                        interpreter's sys.path, e.g. torch_memory_saver's)
#   --env=ENGINE_PYTHON=/host/usr/bin/python3.X
#   --env=ENGINE_LOADER=/host/usr/lib/x86_64-linux-gnu/ld-linux-x86-64.so.2
#   --env=ENGINE_LIBRARY_PATH=/host/usr/lib/x86_64-linux-gnu:...
#   --env=ENGINE_PYTHON_HOME=/host/usr   --env=ENGINE_SITE=VENV/lib/python3.X/site-packages:...
#
# Non-recursive binds (",bind"): the host's submounts under /usr (the driver's
# squashfs on the GPU hosts) stay out; CDI brings the driver in. Every bind
# is read-only and named in the container's spec, so runc hands each to CRIU
# as an external mount and a restore binds the same host paths again.
#
# host-python.sh --pod [PYTHON]: the same for a pod, as one JSON object
# {volumes, volumeMounts, env} (hostPath volumes, read-only). CRI binds every
# volume recursively, and CRIU cannot dump a submount no spec names, so a bind
# that holds a host mount point is split into its entries around it; the
# mount point itself stays out (the driver: the device plugin's CDI spec
# brings it).
set -euo pipefail
form=flags
[ "${1:-}" != --pod ] || { form=pod; shift; }
py=${1:-$(command -v python3)} || { echo "host-python.sh: no python3 on PATH" >&2; exit 1; }

FORM=$form "$py" - <<'PY'
import json, os, sys, sysconfig

HOST = "/host"
base = os.path.realpath(sys.executable)          # the venv's python -> the base interpreter
prefix, base_prefix = os.path.realpath(sys.prefix), os.path.realpath(sys.base_prefix)
under = lambda p, d: p == d or p.startswith(d.rstrip("/") + "/")
cpath = lambda p: HOST + p if under(p, "/usr") else p   # path of a host file in the container

binds = ["/usr"]
def bind(p):
    if any(under(p, b) for b in binds):
        return
    binds[:] = [b for b in binds if not under(b, p)] + [p]

if not under(base_prefix, "/usr"):
    bind(base_prefix)
if prefix != base_prefix:
    bind(prefix)

stdlib = {os.path.realpath(sysconfig.get_path(k)) for k in ("stdlib", "platstdlib")}
sites = []
for p in sys.path:
    if not p or not os.path.isdir(p):
        continue
    rp = os.path.realpath(p)
    if rp in stdlib or rp.endswith("lib-dynload") or rp == os.path.realpath(os.getcwd()):
        continue
    if not under(rp, "/usr"):
        bind(rp)
    sites.append(cpath(rp))

interp = "/lib64/ld-linux-x86-64.so.2"
try:
    with open(base, "rb") as f:
        blob = f.read(4096)
    i = blob.find(b"/lib")
    if i >= 0:
        interp = blob[i:blob.index(b"\0", i)].decode()
except (OSError, ValueError):
    pass
loader = os.path.realpath(interp)
if not under(loader, "/usr"):
    sys.exit(f"host-python.sh: the host's dynamic loader {loader} is not under /usr")

# The interpreter's own LIBDIR first: a Python built outside /usr (pyenv)
# must find its libpython before the host's same-named one.
libdirs = []
for d in (sysconfig.get_config_var("LIBDIR") or "", os.path.dirname(loader), "/usr/lib/x86_64-linux-gnu",
          "/usr/lib64", "/usr/lib"):
    d = os.path.realpath(d) if d else ""
    if d and os.path.isdir(d) and cpath(d) not in libdirs:
        libdirs.append(cpath(d))

env = [("ENGINE_PYTHON", cpath(base)), ("ENGINE_LOADER", cpath(loader)),
       ("ENGINE_LIBRARY_PATH", ":".join(libdirs)),
       ("ENGINE_PYTHON_HOME", cpath(base_prefix)), ("ENGINE_SITE", ":".join(sites))]
if os.environ["FORM"] == "flags":
    out = [f"--volume={b}:{cpath(b) if b == '/usr' else b}:ro,bind" for b in binds]
    print("\n".join(out + [f"--env={k}={v}" for k, v in env]))
    sys.exit(0)

with open("/proc/self/mountinfo") as f:
    points = {l.split()[4].replace("\\040", " ") for l in f}

def split(p):
    """p itself when no mount point lies beneath it, else its entries, each split again."""
    if not any(under(m, p) and m != p for m in points):
        return [p]
    out = []
    for e in sorted(os.listdir(p)):
        c = os.path.join(p, e)
        if c not in points and (os.path.isdir(c) or os.path.isfile(c)):
            out += split(c)
    return out

volumes, mounts = [], []
for b in binds:
    for i, p in enumerate(split(b)):
        name = f"host-python-{len(volumes)}"
        volumes.append({"name": name, "hostPath": {"path": p}})
        mounts.append({"name": name, "mountPath": cpath(p), "readOnly": True})
print(json.dumps({"volumes": volumes, "volumeMounts": mounts,
                  "env": [{"name": k, "value": v} for k, v in env]}))
PY
