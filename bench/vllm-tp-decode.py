#!/usr/bin/env python3
"""vllm-tp-decode.py MODEL: what the multi-GPU checkpoint settings cost in
decode speed. Two tensor-parallel vLLM servers of MODEL run on the host
(integrations/vllm/serve.py, vLLM from ENGINE_SITE): "checkpointable" with the
settings serve.py sets (NCCL's P2P and NVLS off, custom all-reduce and
symmetric memory off), "default" with NCCL's and vLLM's own choices.
With 2 x TP GPUs both start at once on GPUs 0..TP-1 and TP..2TP-1;
otherwise one after the other. Once both serve, each is measured alone:
one stream of --tokens tokens, then --batch streams at once. Prints one
JSON object; exit 1 when a server does not start (its log's tail shown).

--against no-shm measures instead against the settings with NCCL's
shared-memory transport also off (NCCL_SHM_DISABLE=1: all-reduces over
loopback sockets), as serve.py set them before the transport was shown to
survive a checkpoint.
--checkpoint-in-place then puts each server to sleep (level 1), runs
cuda-checkpoint lock, checkpoint, restore and unlock on all its CUDA
processes at once, wakes it and says whether its greedy tokens and decode
speed came back: whether that configuration survives the driver's
checkpoint, before any CRIU.

Environment: ENGINE_SITE (vLLM's site folder; default /var/tmp/vllm-site),
PYTHON (the host's python3 with torch). docs/multi-gpu.md reads the result.
"""
import argparse
import concurrent.futures
import json
import os
import shutil
import subprocess
import sys
import time
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
SERVE = os.path.join(HERE, "..", "integrations", "vllm", "serve.py")
WEIGHTS = os.path.abspath(os.path.join(HERE, "..", "integrations", "weights"))

# NCCL's and vLLM's defaults, given explicitly: serve.py sets only what is unset.
DEFAULT_ENV = {"NCCL_P2P_DISABLE": "0", "NCCL_SHM_DISABLE": "0", "NCCL_NVLS_ENABLE": "2",
               "NCCL_CUMEM_ENABLE": "0",  # vLLM's own default (vllm/env_override.py)
               "VLLM_ALLREDUCE_USE_SYMM_MEM": "1"}
# serve.py's settings but NCCL's shared-memory transport.
NO_SHM_ENV = {"NCCL_SHM_DISABLE": "1"}


def start(name, gpus, port, args, extra_env, logdir):
    env = dict(os.environ, MODEL_PATH=os.path.abspath(args.model), ENGINE_PORT=str(port),
               ENGINE_HOST="127.0.0.1", CUDA_VISIBLE_DEVICES=",".join(map(str, gpus)),
               # What the vllm-engine image sets (images/gpu-engine/build.sh); the weight
               # set client beside the plugin, as in the image.
               VLLM_USE_FLASHINFER_SAMPLER="0", VLLM_HOST_IP="127.0.0.1", VLLM_NO_USAGE_STATS="1",
               VLLM_SERVER_DEV_MODE="1",  # /sleep and /wake_up
               ENGINE_SITE=os.environ.get("ENGINE_SITE", "/var/tmp/vllm-site") + ":" + WEIGHTS)
    # One compile cache each: two servers compiling at once into one cache race.
    env["VLLM_CACHE_ROOT"] = os.path.join(os.path.abspath(logdir), f"{name}-cache")
    env.update(extra_env)
    flags = ["--tensor-parallel-size", str(args.tp), "--max-model-len", "2048"]
    if name == "default":
        flags.append("--no-disable-custom-all-reduce")
    log = open(os.path.join(logdir, f"{name}.log"), "w")
    p = subprocess.Popen([os.environ.get("PYTHON", "python3"), SERVE] + flags, env=env,
                         stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    return {"name": name, "gpus": gpus, "port": port, "proc": p, "log": log.name, "t0": time.monotonic()}


def call(port, path, body=None, timeout=600):
    req = urllib.request.Request(f"http://127.0.0.1:{port}{path}",
                                 data=None if body is None else json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=timeout) as r:
        return json.loads(r.read() or b"null")


def wait_ready(s, deadline):
    while time.monotonic() < deadline:
        if s["proc"].poll() is not None:
            break
        try:
            call(s["port"], "/v1/models", timeout=5)
            s["ready_s"] = round(time.monotonic() - s["t0"], 1)
            return True
        except OSError:
            time.sleep(2)
    with open(s["log"]) as f:
        tail = f.readlines()[-25:]
    print(f"vllm-tp-decode: the {s['name']} server did not start (log {s['log']}):\n" + "".join(tail),
          file=sys.stderr)
    return False


def complete(port, tokens, prompt):
    body = {"model": call(port, "/v1/models")["data"][0]["id"], "prompt": prompt,
            "max_tokens": tokens, "temperature": 0, "ignore_eos": True}
    t = time.monotonic()
    out = call(port, "/v1/completions", body)
    return out["usage"]["completion_tokens"], time.monotonic() - t


def measure(s, args):
    port = s["port"]
    complete(port, 16, "warm up")
    n, secs = complete(port, args.tokens, "Rekindle restores warm GPU engines")
    one = n / secs
    prompts = [f"request {i}: def main():" for i in range(args.batch)]
    t = time.monotonic()
    with concurrent.futures.ThreadPoolExecutor(args.batch) as ex:
        done = list(ex.map(lambda p: complete(port, args.tokens, p), prompts))
    batch = sum(n for n, _ in done) / (time.monotonic() - t)
    return {"gpus": s["gpus"], "ready_s": s["ready_s"], "one_stream_tok_s": round(one, 1),
            f"batch_{args.batch}_tok_s": round(batch, 1)}


def greedy(port):
    body = {"model": call(port, "/v1/models")["data"][0]["id"], "prompt": "Rekindle restores",
            "max_tokens": 32, "temperature": 0, "ignore_eos": True}
    return call(port, "/v1/completions", body)["choices"][0]["text"]


def cuda_pids(sid):
    """The processes of the server's session that have the CUDA driver mapped."""
    out = []
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open(f"/proc/{d}/stat") as f:
                session = int(f.read().rsplit(")", 1)[1].split()[3])  # state, ppid, pgrp, session
            with open(f"/proc/{d}/maps") as f:
                if session == sid and "libcuda.so" in f.read():
                    out.append(int(d))
        except (OSError, ValueError, IndexError):
            continue
    return sorted(out)


def in_place(s, args):
    """Sleep, cuda-checkpoint every CUDA process of the server (each step on
    all at once), wake; what came back."""
    tool = shutil.which("cuda-checkpoint") or "/opt/rekindle/bin/cuda-checkpoint"
    port = s["port"]
    before = greedy(port)
    call(port, "/sleep?level=1", {})
    pids = cuda_pids(s["proc"].pid)
    out = {"cuda_processes": len(pids)}
    for action in ("lock", "checkpoint", "restore", "unlock"):
        extra = ["--device-map", "none"] if action == "restore" else []
        t = time.monotonic()
        with concurrent.futures.ThreadPoolExecutor(len(pids) or 1) as ex:
            procs = list(ex.map(lambda p: subprocess.run([tool, "--action", action, "--pid", str(p)] + extra,
                                                         capture_output=True, text=True), pids))
        out[f"{action}_s"] = round(time.monotonic() - t, 2)
        failed = [f"pid {p}: {r.stderr.strip() or r.returncode}" for p, r in zip(pids, procs) if r.returncode]
        if failed:
            out["failed"] = f"{action}: " + "; ".join(failed)
            return out
    call(port, "/wake_up", {})
    out["same_tokens"] = greedy(port) == before
    n, secs = complete(port, args.tokens, "Rekindle restores warm GPU engines")
    out["one_stream_tok_s_after"] = round(n / secs, 1)
    return out


def in_place_or_error(s, args):
    """in_place, or what failed: the decode numbers already measured are
    printed either way."""
    try:
        return in_place(s, args)
    except OSError as err:  # urllib's errors, a server that died
        return {"failed": f"{type(err).__name__}: {err}"}


def stop(s):
    try:
        os.killpg(s["proc"].pid, 15)
        s["proc"].wait(60)
    except (ProcessLookupError, subprocess.TimeoutExpired):
        os.killpg(s["proc"].pid, 9)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("model")
    ap.add_argument("--tp", type=int, default=2)
    ap.add_argument("--gpus", type=int, default=0, help="GPUs on this host (default: nvidia-smi's count)")
    ap.add_argument("--tokens", type=int, default=256)
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--logs", default=".")
    ap.add_argument("--timeout", type=int, default=420, help="seconds for a server to start")
    ap.add_argument("--against", choices=("default", "no-shm"), default="default",
                    help="the second server: NCCL's and vLLM's own choices, or the settings with NCCL's SHM off too")
    ap.add_argument("--checkpoint-in-place", action="store_true",
                    help="then cuda-checkpoint each server's processes in place and say what came back")
    args = ap.parse_args()
    ngpu = args.gpus or len(subprocess.check_output(["nvidia-smi", "-L"], text=True).splitlines())
    if ngpu < args.tp:
        sys.exit(f"vllm-tp-decode: tensor parallel {args.tp} needs {args.tp} GPUs, this host has {ngpu}")
    os.makedirs(args.logs, exist_ok=True)
    kinds = [("checkpointable", {}), ("default", DEFAULT_ENV) if args.against == "default" else ("no-shm", NO_SHM_ENV)]
    together = ngpu >= 2 * args.tp
    result = {"model": args.model, "tp": args.tp, "started_together": together}
    servers = []
    try:
        for i, (name, env) in enumerate(kinds):
            gpus = list(range(i * args.tp, (i + 1) * args.tp)) if together else list(range(args.tp))
            s = start(name, gpus, 8100 + i, args, env, args.logs)
            servers.append(s)
            if not together:
                if not wait_ready(s, time.monotonic() + args.timeout):
                    return 1
                result[name] = measure(s, args)
                if args.checkpoint_in_place:
                    result[name]["in_place"] = in_place_or_error(s, args)
                stop(s)
        if together:
            for s in servers:
                if not wait_ready(s, s["t0"] + args.timeout):
                    return 1
            for s in servers:
                result[s["name"]] = measure(s, args)
        if args.checkpoint_in_place:
            for s in servers:
                if s["proc"].poll() is None:
                    result[s["name"]]["in_place"] = in_place_or_error(s, args)
    finally:
        for s in servers:
            if s["proc"].poll() is None:
                stop(s)
    k = f"batch_{args.batch}_tok_s"
    other = kinds[1][0]
    result["cost_against_" + other] = {m: round(1 - result["checkpointable"][m] / result[other][m], 3)
                                       for m in ("one_stream_tok_s", k)}
    print(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
