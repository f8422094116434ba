#!/usr/bin/env python3
"""Rekindle CPU reference engine.

A stand-in for an inference server with SGLang's HTTP memory API, small
enough to checkpoint and restore with CRIU on a machine without a GPU:

- "weights": a buffer read from a file in the image (ENGINE_WEIGHTS), its
  SHA-256 checked against ENGINE_WEIGHTS.sha256 on every (re)load; dropped by
  POST /release_memory_occupation, reloaded by POST /resume_memory_occupation.
- a counter advanced by a background thread every ENGINE_TICK_MS, so a
  restored process shows it continued rather than restarted.
- ENGINE_STATE_MB of extra resident memory that quiescing keeps, for
  benchmarks that need a large checkpoint; with ENGINE_STATE_HALF_ZERO=1
  every other MiB of it is zeros (written, so resident), as a CUDA
  process's host copy of its GPU memory often is.
- POST /generate: deterministic "greedy" text computed from the weights and
  the prompt, identical before a checkpoint and after a restore.
- GET /state?verify=1: /state plus memory_sha256, the SHA-256 of the weights
  buffer as it is in memory at the time of the request (null while released),
  and state_sha256, that of the ENGINE_STATE_MB buffer,
  so a test can show a restored process holds the bytes the image ships.
  weights_sha256 (the checksum file's) and loaded_sha256 (computed when the
  file was read) cannot show that: they are equal whenever weights are loaded.

CRIU-friendly by construction: stdlib only (no io_uring), binds 0.0.0.0,
HTTP/1.0 (every connection closes after its response), logs to stdout.

  server.py                          serve (env: ENGINE_PORT, ENGINE_HOST, ...)
  server.py make-weights PATH MB     write PATH and PATH.sha256 from a fixed seed
  server.py check [URL]              exit 0 when GET URL (default /health) is 200
"""

import ctypes
import gc
import hashlib
import os
import sys
import threading
import time
from urllib.parse import parse_qs, urlsplit

# images/engine_http.py: beside this file in the image, one folder up in the repo.
_here = os.path.dirname(os.path.abspath(__file__))
sys.path.append(_here if os.path.isfile(os.path.join(_here, "engine_http.py")) else os.path.dirname(_here))
import engine_http  # noqa: E402

WEIGHTS_SEED = b"rekindle-cpu-engine-weights-v1"
CHUNK = 1 << 20
MAX_NEW_TOKENS = 4096

# A fixed vocabulary of 256 pronounceable tokens: one per byte value.
_C = "bdfgklmnprstvzhj"
_V = "aeiouy"
VOCAB = [_C[i % 16] + _V[(i // 16) % 6] + _C[(i * 7 + 3) % 16] for i in range(256)]


log = engine_http.logger("engine")
check = engine_http.check


def make_weights(path, mb):
    """Write mb MiB of seeded pseudo-random bytes to path and their SHA-256 to path.sha256."""
    h = hashlib.sha256()
    tmp = path + ".tmp"
    with open(tmp, "wb") as f:
        for i in range(mb):
            block = hashlib.shake_256(WEIGHTS_SEED + i.to_bytes(8, "little")).digest(CHUNK)
            h.update(block)
            f.write(block)
    os.replace(tmp, path)
    digest = h.hexdigest()
    with open(path + ".sha256", "w") as f:
        f.write(f"{digest}  {os.path.basename(path)}\n")
    return digest


def greedy(weights, prompt, n):
    """Deterministic generation: each step hashes the running state with a
    64-byte window of the weights that the state selects, then picks the
    token named by the digest's first byte."""
    state = hashlib.sha256(prompt.encode("utf-8")).digest()
    span = len(weights) - 64
    out = []
    for _ in range(n):
        at = int.from_bytes(state[:8], "little") % span
        state = hashlib.sha256(state + weights[at:at + 64]).digest()
        out.append(VOCAB[state[0]])
    return " ".join(out)


def _malloc_trim():
    # Hand freed heap pages back to the kernel so a checkpoint taken after
    # release does not carry them. Best effort: not every libc has it.
    try:
        ctypes.CDLL(None).malloc_trim(0)
    except (OSError, AttributeError):
        pass


class Engine:
    def __init__(self, weights_path, state_mb=0, tick_ms=100, state_half_zero=False):
        self.weights_path = weights_path
        self.expected = self._expected_sha256()
        self.lock = threading.Lock()
        self.weights = None
        self.loaded_sha256 = None
        self.counter = 0
        self.tick = tick_ms / 1000.0
        self.releases = 0
        self.resumes = 0
        self.generations = 0
        self.prefix_cache = {}
        self.start_time = time.time()
        # Extra resident memory, filled (not just reserved) so every page is real.
        self.state = bytearray(b"\xa5") * (state_mb << 20) if state_mb > 0 else bytearray()
        if state_half_zero:
            for mib in range(1, state_mb, 2):
                self.state[mib << 20:(mib + 1) << 20] = bytes(1 << 20)
        self.state_mb = state_mb
        self.load()
        threading.Thread(target=self._count, name="counter", daemon=True).start()

    def _expected_sha256(self):
        sumfile = self.weights_path + ".sha256"
        try:
            with open(sumfile) as f:
                return f.read().split()[0]
        except (OSError, IndexError) as e:
            raise SystemExit(f"engine: cannot read weights checksum {sumfile}: {e} "
                             f"(create it with: server.py make-weights {self.weights_path} MB)")

    def _count(self):
        while True:
            time.sleep(self.tick)
            with self.lock:
                self.counter += 1

    def load(self):
        """Read the weights file and verify it; raise ValueError on a mismatch."""
        with open(self.weights_path, "rb") as f:
            data = f.read()
        got = hashlib.sha256(data).hexdigest()
        if got != self.expected:
            raise ValueError(f"weights checksum mismatch for {self.weights_path}: "
                             f"expected {self.expected}, got {got}")
        with self.lock:
            self.weights = data
            self.loaded_sha256 = got
        log(f"weights loaded: {len(data)} bytes, sha256 {got}")

    def release(self):
        with self.lock:
            was = self.weights is not None
            self.weights = None
            self.loaded_sha256 = None
            self.prefix_cache.clear()
            if was:
                self.releases += 1
        gc.collect()
        _malloc_trim()
        log("weights released" if was else "release: weights were not loaded")

    def resume(self):
        if self.weights is not None:
            log("resume: weights already loaded")
            return
        self.load()
        with self.lock:
            self.resumes += 1

    def generate(self, prompt, n):
        with self.lock:
            weights = self.weights
            cached = self.prefix_cache.get(prompt, 0)
        if weights is None:
            return None
        text = greedy(weights, prompt, n)
        with self.lock:
            self.prefix_cache[prompt] = len(prompt.split())
            self.generations += 1
        meta = {
            "id": hashlib.sha256(f"{prompt}\0{n}".encode()).hexdigest()[:32],
            "prompt_tokens": len(prompt.split()),
            "completion_tokens": n,
            "cached_tokens": cached,
            "finish_reason": {"type": "length", "length": n},
            "weights_sha256": self.expected,
        }
        return {"text": text, "meta": meta, "meta_info": meta}

    def flush(self):
        with self.lock:
            self.prefix_cache.clear()

    def snapshot(self, verify=False):
        """The engine's state; with verify, also memory_sha256: the SHA-256 of
        the weights buffer hashed now, from the bytes this process holds."""
        with self.lock:
            weights = self.weights
            state = {
                "counter": self.counter,
                "loaded": self.weights is not None,
                "weights_sha256": self.expected,
                "loaded_sha256": self.loaded_sha256,
                "weights_bytes": len(self.weights) if self.weights is not None else 0,
                "weights_path": self.weights_path,
                "state_mb": self.state_mb,
                "pid": os.getpid(),
                "start_time": self.start_time,
                "uptime_s": round(time.time() - self.start_time, 3),
                "releases": self.releases,
                "resumes": self.resumes,
                "generations": self.generations,
            }
        if verify:
            # Outside the lock: the buffer is immutable bytes, and hashing
            # 64 MiB must not stall the counter or other requests.
            state["memory_sha256"] = hashlib.sha256(weights).hexdigest() if weights is not None else None
            state["state_sha256"] = hashlib.sha256(self.state).hexdigest()
        return state


class Handler(engine_http.JSONHandler):
    server_version = "rekindle-cpu-engine/1"
    log = staticmethod(log)

    def do_GET(self):
        e = self.engine
        path = self.path.split("?")[0]
        if path in ("/health", "/health_generate"):
            if e.weights is None:
                self._reply(503, {"status": "released", "error": "weights released; POST /resume_memory_occupation"})
            else:
                self._reply(200, {"status": "ok"})
        elif path == "/state":
            query = parse_qs(urlsplit(self.path).query)
            self._reply(200, e.snapshot(verify=query.get("verify", [""])[0] not in ("", "0")))
        elif path == "/get_model_info":
            self._reply(200, {"model_path": e.weights_path, "is_generation": True,
                              "weights_sha256": e.expected})
        else:
            self._reply(404, {"error": f"no such endpoint: GET {path}"})

    def do_POST(self):
        e = self.engine
        path = self.path.split("?")[0]
        try:
            body = self._body()
        except ValueError as err:
            self._reply(400, {"error": f"bad JSON body: {err}"})
            return
        if path == "/generate":
            self._generate(body)
        elif path == "/flush_cache":
            e.flush()
            self._reply(200, {"status": "ok", "message": "cache flushed"})
        elif path == "/release_memory_occupation":
            e.release()
            self._reply(200, {"status": "ok", "loaded": False})
        elif path == "/resume_memory_occupation":
            try:
                e.resume()
            except (OSError, ValueError) as err:
                log(f"resume failed: {err}")
                self._reply(500, {"status": "error", "error": str(err)})
                return
            self._reply(200, {"status": "ok", "loaded": True, "weights_sha256": e.loaded_sha256})
        else:
            self._reply(404, {"error": f"no such endpoint: POST {path}"})

    def _generate(self, body):
        prompt = body.get("text")
        sp = body.get("sampling_params") or {}
        n = body.get("max_new_tokens", sp.get("max_new_tokens", 16))
        if not isinstance(prompt, str):
            self._reply(400, {"error": 'body needs "text": a string prompt'})
            return
        if not isinstance(n, int) or not 0 < n <= MAX_NEW_TOKENS:
            self._reply(400, {"error": f"max_new_tokens must be an integer in 1..{MAX_NEW_TOKENS}"})
            return
        out = self.engine.generate(prompt, n)
        if out is None:
            self._reply(503, {"error": "weights released; POST /resume_memory_occupation first"})
        else:
            self._reply(200, out)


def serve():
    host = os.environ.get("ENGINE_HOST", "0.0.0.0")
    port = int(os.environ.get("ENGINE_PORT", "30000"))
    weights = os.environ.get("ENGINE_WEIGHTS", "/engine/weights.bin")
    state_mb = int(os.environ.get("ENGINE_STATE_MB", "0"))
    tick_ms = int(os.environ.get("ENGINE_TICK_MS", "100"))
    half_zero = os.environ.get("ENGINE_STATE_HALF_ZERO", "0") == "1"
    log(f"pid {os.getpid()} starting: weights {weights}, state {state_mb} MiB{' (half zeros)' if half_zero else ''}, port {port}")
    try:
        Handler.engine = Engine(weights, state_mb=state_mb, tick_ms=tick_ms, state_half_zero=half_zero)
    except (OSError, ValueError) as err:
        raise SystemExit(f"engine: cannot load weights: {err}")
    engine_http.serve(host, port, Handler)


def main(argv):
    if len(argv) >= 2 and argv[1] == "make-weights":
        if len(argv) != 4:
            raise SystemExit("usage: server.py make-weights PATH MB")
        print(make_weights(argv[2], int(argv[3])))
        return 0
    if len(argv) >= 2 and argv[1] == "check":
        return engine_http.check_command(argv)
    if len(argv) > 1:
        raise SystemExit(__doc__)
    serve()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
