#!/usr/bin/env python3
"""serve.py [LAUNCH_SERVER FLAGS...]: the sglang-engine image's server, run by
/engine/launch.sh with the GPU host's Python. It starts SGLang's server on the
model in $MODEL_PATH with its memory saver on, so that
`oci-checkpoint create --engine sglang` can release the GPU memory before the
dump and the wake helper can resume it (and reload the weights) after a restore.

SGLang comes from the host: the folder its wheels were installed into
(integrations/sglang/wheels.sh; pip install --target DIR) is bound into the
container and named in ENGINE_SITE, beside the host's torch. ENGINE_SITE also
goes into PYTHONPATH, so the processes SGLang spawns (its scheduler and
detokenizer) import the same packages.

Environment: MODEL_PATH (/models/model), ENGINE_HOST (0.0.0.0), ENGINE_PORT
(30000), ENGINE_SGLANG_ARGS (more flags, split on spaces),
ENGINE_SGLANG_DEFAULTS (flags given unless ENGINE_SGLANG_ARGS names their
option), ENGINE_SGLANG_MEMORY_SAVER (1; 0 leaves --enable-memory-saver out, to test the
checkpoint's refusal), ENGINE_WEIGHT_SET (/rekindle/weights/NAME: weights from
that weight set, through the rekindle_sglang plugin beside this file, at the
start and at every wake). The kernels SGLang compiles at run time come built
from the site folder (prebuild-kernels.sh): the container has no nvcc. With tensor or pipeline parallel > 1 it sets what a
multi-GPU checkpoint needs (multi_gpu below, docs/multi-gpu.md).

`serve.py phases LOG` reads an SGLang server's log and prints its cold-start
phases as JSON, from SGLang's own log lines.
"""
import json
import os
import re
import site
import sys

HERE = os.path.dirname(os.path.abspath(__file__))


def add_sites():
    before = list(sys.path)
    # HERE holds the rekindle_sglang plugin and its dist-info, which SGLang
    # finds by entry point in each of its processes.
    sites = [d for d in os.environ.get("ENGINE_SITE", "").split(":") if d] + [HERE]
    for d in sites:
        site.addsitedir(d)
    # The site's packages before the host's: SGLang pins its own transformers.
    sys.path[:] = [p for p in sys.path if p not in before] + before
    old = os.environ.get("PYTHONPATH", "")
    os.environ["PYTHONPATH"] = ":".join(sites + ([old] if old else []))


# What an SGLang of several GPU workers needs for cuda-checkpoint on driver
# 580, which cannot checkpoint GPU memory that processes share: NCCL's
# sharing turned off (SGLang itself sets NCCL_CUMEM_ENABLE=0 unless
# --enable-symm-mem), and SGLang's custom all-reduce, which maps the other
# GPUs' buffers by CUDA IPC. oci-checkpoint's preflight refuses a server
# whose /server_info shows the custom all-reduce or symmetric memory on.
MULTI_GPU_ENV = [("NCCL_P2P_DISABLE", "1"), ("NCCL_NVLS_ENABLE", "0"), ("NCCL_CUMEM_ENABLE", "0")]
NO_CUSTOM_ALL_REDUCE = "--disable-custom-all-reduce"
TP_FLAGS = ("--tp-size", "--tensor-parallel-size", "--tp")
PP_FLAGS = ("--pp-size", "--pipeline-parallel-size", "--pp")


def _flag(arg):
    """An argument's option name as SGLang reads it (it takes _ for -)."""
    name = arg.split("=", 1)[0]
    return "--" + name[2:].replace("_", "-") if name.startswith("--") else name


def size(args, flags):
    """N of the last of flags given (--flag N or --flag=N); 1 when absent or
    not a number (SGLang then refuses the flag itself)."""
    n = "1"
    for i, a in enumerate(args):
        if _flag(a) in flags:
            if "=" in a:
                n = a.split("=", 1)[1]
            elif i + 1 < len(args):
                n = args[i + 1]
    return int(n) if n.isdigit() else 1


def multi_gpu(args, env):
    """For tensor x pipeline parallel > 1: sets MULTI_GPU_ENV in env where
    unset (a value the user set stays) and adds --disable-custom-all-reduce.
    Returns the arguments and the line to print (None: nothing to do)."""
    tp, pp = size(args, TP_FLAGS), size(args, PP_FLAGS)
    if tp * pp <= 1:
        return args, None
    done, kept = [], []
    for k, v in MULTI_GPU_ENV:
        if k not in env:
            env[k] = v
            done.append(f"{k}={v}")
        elif env[k] != v:
            kept.append(f"{k}={env[k]}")
    said = [f"set {' '.join(done)}"] if done else []
    if NO_CUSTOM_ALL_REDUCE not in {_flag(a) for a in args}:
        args = args + [NO_CUSTOM_ALL_REDUCE]
        said.append("added " + NO_CUSTOM_ALL_REDUCE)
    line = f"serve.py: tensor parallel {tp} x pipeline parallel {pp}: "
    line += (" and ".join(said) + ", so that the GPU workers share no GPU memory, which cuda-checkpoint "
             "(driver 580) cannot checkpoint") if said else "the settings a multi-GPU checkpoint needs are given"
    if kept:
        line += f"; kept {' '.join(kept)} as given"
    return args, line


def defaults(env):
    """ENGINE_SGLANG_DEFAULTS: flags given unless ENGINE_SGLANG_ARGS chooses
    their option. The sglang-engine image sets kernels that need nothing its
    container lacks: wheels.sh leaves FA3 (SGLang's default on Hopper) out
    of the site, and flashinfer's sampling kernels compile with nvcc at first
    use."""
    words = env.get("ENGINE_SGLANG_DEFAULTS", "").split()
    out, i = [], 0
    while i < len(words):
        if "=" in words[i] or i + 1 == len(words) or words[i + 1].startswith("--"):
            out.append((words[i], None))
            i += 1
        else:
            out.append((words[i], words[i + 1]))
            i += 2
    return out


def without_saver_preload(env):
    """launch.sh preloads torch_memory_saver's hook into this process (it also
    puts the libcudart the hook needs on the library path); SGLang adds the
    hook to its schedulers' LD_PRELOAD itself and refuses it twice."""
    kept = [p for p in env.get("LD_PRELOAD", "").split(":") if p and "torch_memory_saver" not in os.path.basename(p)]
    if kept:
        env["LD_PRELOAD"] = ":".join(kept)
    else:
        env.pop("LD_PRELOAD", None)


def prebuilt_kernels(env):
    """SGLang's tvm-ffi kernels that prebuild-kernels.sh built into a site
    folder on the host: the container has no CUDA compiler to build them."""
    if "TVM_FFI_CACHE_DIR" in env:
        return
    for d in env.get("ENGINE_SITE", "").split(":"):
        cache = os.path.join(d, ".cache", "tvm-ffi") if d else ""
        if cache and os.path.isdir(cache):
            env["TVM_FFI_CACHE_DIR"] = cache
            return


def command(model, args, env):
    """SGLang's launch_server arguments for this container."""
    argv = ["--model-path", model, "--host", env.get("ENGINE_HOST", "0.0.0.0"),
            "--port", env.get("ENGINE_PORT", "30000")]
    if env.get("ENGINE_SGLANG_MEMORY_SAVER", "1") != "0":
        argv.append("--enable-memory-saver")
    given = {_flag(a) for a in args}
    for flag, value in defaults(env):
        if _flag(flag) not in given:
            argv += [flag] if value is None else [flag, value]
    return argv + list(args)


def serve(args):
    add_sites()
    model = os.environ.get("MODEL_PATH", "/models/model")
    if not os.path.isfile(os.path.join(model, "config.json")):
        sys.exit(f"serve.py: no model in {model} (no config.json): bind a model folder there "
                 "(--volume HOST_DIR:/models/model:ro) or set MODEL_PATH")
    # Before SGLang is imported: it and NCCL read the environment.
    user, note = multi_gpu(os.environ.get("ENGINE_SGLANG_ARGS", "").split() + list(args), os.environ)
    if note:
        print(note, file=sys.stderr, flush=True)
    without_saver_preload(os.environ)
    prebuilt_kernels(os.environ)
    try:
        import sglang  # noqa: F401
    except ImportError as e:
        sys.exit(f"serve.py: cannot import sglang ({e}): bind the host's SGLang site folder into the "
                 "container and name it in ENGINE_SITE (images/README.md, SGLang engine)")
    sys.argv = ["sglang.launch_server"] + command(model, user, os.environ)
    import runpy
    runpy.run_module("sglang.launch_server", run_name="__main__", alter_sys=True)


# SGLang 0.5's own lines: (key, pattern of the seconds).
PHASES = [("weights_s", r"Load weight end\. elapsed=([\d.]+) s")]
# Lines only a cold start writes: none may appear after a restore.
COLD_LINES = re.compile(r"Load weight begin|Capturing batches|Capture cuda graph|torch\.compile|Compiling ")
READY = "The server is fired up and ready to roll!"
STAMP = re.compile(r"\[(\d{4})-(\d\d)-(\d\d) (\d\d):(\d\d):(\d\d)")


def phases(text):
    out = {k: None for k, _ in PHASES}
    for key, pat in PHASES:
        m = re.findall(pat, text)
        if m:
            out[key] = float(m[-1])
    out["cold_lines"] = sum(1 for line in text.splitlines() if COLD_LINES.search(line))
    first = ready = None
    for line in text.splitlines():
        m = STAMP.search(line)
        if not m:
            continue
        t = int(m[4]) * 3600 + int(m[5]) * 60 + int(m[6])
        first = t if first is None else first
        if READY in line:
            ready = t
    out["logged_s"] = ready - first if ready is not None and first is not None else None
    return out


def main(argv):
    if argv[:1] == ["phases"]:
        if len(argv) != 2:
            sys.exit("usage: serve.py phases LOG")
        with open(argv[1], errors="replace") as f:
            print(json.dumps(phases(f.read())))
        return
    serve(argv)


if __name__ == "__main__":
    main(sys.argv[1:])
