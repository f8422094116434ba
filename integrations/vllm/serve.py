#!/usr/bin/env python3
"""serve.py [VLLM SERVE FLAGS...]: the vllm-engine image's server, run by
/engine/launch.sh with the GPU host's Python. It starts vLLM's OpenAI API
server on the model in $MODEL_PATH with sleep mode on, so that
`oci-checkpoint create --engine vllm` can put it to sleep before the dump
and the wake helper can wake it after a restore.

vLLM comes from the host: its site folder (pip install --target DIR, or the
venv that holds it) is bound into the container and named in ENGINE_SITE,
beside the host's torch. ENGINE_SITE also goes into PYTHONPATH, so the
processes vLLM spawns (its EngineCore) import the same packages.

Environment: MODEL_PATH (/models/model), ENGINE_HOST (0.0.0.0),
ENGINE_PORT (8000), ENGINE_VLLM_ARGS (more flags, split on spaces),
ENGINE_VLLM_SLEEP_MODE (1; 0 leaves --enable-sleep-mode out, to test the
checkpoint's refusal), ENGINE_WEIGHT_SET (/rekindle/weights/NAME: weights
from that weight set, through the rekindle_vllm plugin beside this file). With tensor or pipeline parallel > 1 it sets what a
multi-GPU checkpoint needs (multi_gpu below, docs/multi-gpu.md).

`serve.py phases LOG` reads a vLLM server's log and prints its cold-start
phases (weights, compile, graphs, engine init, ready) as JSON, from vLLM's
own log lines.
"""
import json
import os
import re
import site
import sys


HERE = os.path.dirname(os.path.abspath(__file__))


def add_sites():
    before = list(sys.path)
    # HERE holds the rekindle_vllm plugin and its dist-info, which vLLM
    # finds by entry point in each of its processes.
    sites = [d for d in os.environ.get("ENGINE_SITE", "").split(":") if d] + [HERE]
    for d in sites:
        site.addsitedir(d)
    sys.path[:] = [p for p in sys.path if p not in before] + before
    old = os.environ.get("PYTHONPATH", "")
    os.environ["PYTHONPATH"] = ":".join(sites + ([old] if old else []))


# What a vLLM of several GPU workers (tensor or pipeline parallel > 1) needs
# for cuda-checkpoint on driver 580, which cannot checkpoint GPU memory that
# processes share: NCCL's and vLLM's sharing turned off. oci-checkpoint's
# preflight (pkg/engine/multigpu.go) refuses a server without them. NCCL's
# shared-memory transport, host memory only, stays on.
MULTI_GPU_ENV = [("NCCL_P2P_DISABLE", "1"), ("NCCL_NVLS_ENABLE", "0"),
                 ("NCCL_CUMEM_ENABLE", "0"), ("VLLM_ALLREDUCE_USE_SYMM_MEM", "0")]
NO_CUSTOM_ALL_REDUCE = "--disable-custom-all-reduce"


def _flag(arg):
    """An argument's option name as vLLM reads it (it takes _ for -)."""
    name = arg.split("=", 1)[0]
    return "--" + name[2:].replace("_", "-") if name.startswith("--") else name


def parallel_size(args, long, short):
    """N of the last --long N, --long=N, -short N or -short=N in args; 1 when
    absent or not a number (vLLM then refuses the flag itself)."""
    n = "1"
    for i, a in enumerate(args):
        if _flag(a) in (long, short):
            if "=" in a:
                n = a.split("=", 1)[1]
            elif i + 1 < len(args):
                n = args[i + 1]
    return int(n) if n.isdigit() else 1


def multi_gpu(args, env):
    """For a vLLM of tensor x pipeline parallel > 1: sets MULTI_GPU_ENV in env
    where unset (a value the user set stays, and the checkpoint's preflight
    will name it) and adds --disable-custom-all-reduce unless args choose.
    Returns the arguments and the line to print (None: nothing to do)."""
    tp = parallel_size(args, "--tensor-parallel-size", "-tp")
    pp = parallel_size(args, "--pipeline-parallel-size", "-pp")
    if tp * pp <= 1:
        return args, None
    done, kept = [], []
    for k, v in MULTI_GPU_ENV:
        if k not in env:
            env[k] = v
            done.append(f"{k}={v}")
        elif env[k] != v:
            kept.append(f"{k}={env[k]}")
    done = ["set " + " ".join(done)] if done else []
    flags = {_flag(a) for a in args}
    if NO_CUSTOM_ALL_REDUCE not in flags and "--no-" + NO_CUSTOM_ALL_REDUCE[2:] not in flags:
        args = args + [NO_CUSTOM_ALL_REDUCE]
        done.append("added " + NO_CUSTOM_ALL_REDUCE)
    parts = []
    if done:
        parts.append(f"{' and '.join(done)}, so that the GPU workers share no GPU memory, "
                     "which cuda-checkpoint (driver 580) cannot checkpoint")
    if kept:
        parts.append(f"kept {' '.join(kept)} as given (oci-checkpoint create will refuse the server)")
    return args, (f"serve.py: tensor parallel {tp} x pipeline parallel {pp}: "
                  + ("; ".join(parts) or "the settings a multi-GPU checkpoint needs are given"))


def weight_set(args, env):
    """With ENGINE_WEIGHT_SET set, the flags that load the weights from that
    set (rekindle_vllm.py), unless args choose a load format; and the line
    to print."""
    path = env.get("ENGINE_WEIGHT_SET", "")
    if not path:
        return args, None
    if any(_flag(a) == "--load-format" for a in args):
        return args, f"serve.py: ENGINE_WEIGHT_SET={path} but --load-format is given: the weight set is not used"
    return args + ["--load-format", "rekindle"], f"serve.py: weights from the weight set {path} (--load-format rekindle)"


def serve(args):
    add_sites()
    model = os.environ.get("MODEL_PATH", "/models/model")
    if not os.path.isfile(os.path.join(model, "config.json")):
        sys.exit(f"serve.py: no model in {model} (no config.json): bind a model folder there "
                 "(--volume HOST_DIR:/models/model:ro) or set MODEL_PATH")
    # Before vLLM is imported: it and NCCL read the environment.
    user, note = multi_gpu(os.environ.get("ENGINE_VLLM_ARGS", "").split() + list(args), os.environ)
    user, note2 = weight_set(user, os.environ)
    for n in (note, note2):
        if n:
            print(n, file=sys.stderr, flush=True)
    try:
        import vllm  # noqa: F401
    except ImportError as e:
        sys.exit(f"serve.py: cannot import vllm ({e}): bind the host's vLLM site folder into the "
                 "container and name it in ENGINE_SITE (images/README.md, vLLM engine)")
    sys.argv = ["vllm-serve", "--model", model,
                "--host", os.environ.get("ENGINE_HOST", "0.0.0.0"),
                "--port", os.environ.get("ENGINE_PORT", "8000")]
    if os.environ.get("ENGINE_VLLM_SLEEP_MODE", "1") != "0":
        sys.argv.append("--enable-sleep-mode")
    sys.argv += user
    import runpy
    runpy.run_module("vllm.entrypoints.openai.api_server", run_name="__main__", alter_sys=True)


# vLLM 0.24's own lines, in start-up order: (key, pattern of the seconds).
PHASES = [
    ("weights_s", r"Loading weights took ([\d.]+) seconds"),
    ("model_load_s", r"Model loading took [\d.]+ GiB memory and ([\d.]+) seconds"),
    ("dynamo_s", r"Dynamo bytecode transform time: ([\d.]+) s"),
    ("compile_s", r"torch\.compile takes ([\d.]+) s in total|\(compilation: ([\d.]+) s"),
    ("graphs_s", r"Graph capturing finished in ([\d.]+) secs"),
    ("init_engine_s", r"init engine \(profile, create kv cache, warmup model\) took ([\d.]+) s"),
]
# Lines that only a compilation writes: none may appear after a restore.
COMPILE_LINES = re.compile(r"Dynamo bytecode transform time|Compiling a graph for compile range|"
                           r"torch\.compile takes|Graph capturing finished")
STAMP = re.compile(r"\b(\d\d)-(\d\d) (\d\d):(\d\d):(\d\d)(?:\.(\d+))?\b")


def phases(text):
    out = {k: None for k, _ in PHASES}
    for key, pat in PHASES:
        m = [next(g for g in (f if isinstance(f, tuple) else (f,)) if g) for f in re.findall(pat, text)]
        if m:
            out[key] = float(m[-1])
    out["compile_lines"] = sum(1 for line in text.splitlines() if COMPILE_LINES.search(line))
    # The span vLLM logged: its first clock to the last clock before
    # uvicorn's "Application startup complete" (a line without one).
    first = last = ready = None
    for line in text.splitlines():
        m = STAMP.search(line)
        if m:
            last = int(m[3]) * 3600 + int(m[4]) * 60 + int(m[5]) + float("0." + (m[6] or "0"))
            first = last if first is None else first
        elif "Application startup complete" in line and last is not None:
            ready = last
    out["logged_s"] = round(ready - first, 3) if ready is not None else None
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
