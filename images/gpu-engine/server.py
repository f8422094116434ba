#!/usr/bin/env python3
"""Rekindle GPU reference engine.

A real PyTorch transformer behind the CPU reference engine's HTTP API
(SGLang's memory API), standing in for SGLang where SGLang cannot run:

- Qwen2-style decoder: token embedding, RMSNorm, rotary attention with
  grouped KV heads and q/k/v biases, SwiGLU MLP, untied or tied LM head;
  bf16; seeded random weights sized by ENGINE_PARAMS_GB (1 GB .. tens of GB).
- weights live in a safetensors file (ENGINE_WEIGHTS, default
  $ENGINE_WEIGHTS_DIR/<model-id>.safetensors), written on first start, read
  on every later start and on every resume; a GPU-side checksum of the
  loaded tensors must match the one recorded in the file's metadata.
- or from a Rekindle weight set (ENGINE_WEIGHT_SET, e.g. /rekindle/weights/NAME,
  see integrations/weights/): mapped and registered once at start, copied from on
  every resume at PCIe speed; when it is absent, not loaded or holds other
  weights, from the file, with one log line saying why. /state reports each
  reload's source, bytes, seconds and GB/s.
- a static KV cache ([layers, 2, tokens, kv_heads, head_dim]) and one CUDA
  graph for the decode step, captured at start.
- SGLang's memory API through torch_memory_saver, as SGLang uses it: weights
  allocated inside region(tag="weights"), the KV cache inside
  region(tag="kv_cache"), the graph captured with cuda_graph(tag="cuda_graph");
  POST /release_memory_occupation pauses the tags (physical GPU memory goes
  back to the driver, virtual addresses stay), POST /resume_memory_occupation
  resumes them and reloads the weights from the file (the KV cache needs no
  reload: the prefix cache is flushed on release).
- greedy decoding; the prompt runs through the same decode step token by
  token, so the output never depends on what the prefix cache held.

One worker thread does all GPU work; HTTP threads hand it jobs. HTTP/1.0
with Connection: close, stdlib only on the serving side (no io_uring),
binds 0.0.0.0, logs to stdout: friendly to CRIU.

  server.py                        serve (environment below)
  server.py make-weights [PATH]    write the weights file for this configuration
  server.py config                 print the model configuration (no torch needed)
  server.py preload-env            print LD_PRELOAD / library dir for torch_memory_saver
  server.py check [URL]            exit 0 when GET URL (default /health) is 200

Environment: ENGINE_HOST (0.0.0.0), ENGINE_PORT (30000), ENGINE_PARAMS_GB (1),
ENGINE_LAYERS (from the size), ENGINE_SHAPE (auto: 0.5b, 7b or 32b shapes by
size), ENGINE_SEED (1234), ENGINE_WEIGHTS_DIR (/weights), ENGINE_WEIGHTS,
ENGINE_CONTEXT_LEN (4096), ENGINE_KV_GB (1), ENGINE_MEMORY_SAVER (1),
ENGINE_CUDA_GRAPH (1), ENGINE_SITE (extra site-packages folders, ':'-separated),
ENGINE_WEIGHT_SET (a weight set directory; unset: the file only),
ENGINE_BACKEND (reference; transformers: hf_model.py, with ENGINE_COMPILE and
ENGINE_BATCH_SIZES).

Besides SGLang's /generate, POST /v1/completions (OpenAI's, greedy only;
a list of prompts is decoded as one batch by the transformers backend) and
GET /v1/models.
"""

import concurrent.futures
import ctypes
import glob
import hashlib
import importlib.util
import json
import os
import queue
import re
import site
import struct
import sys
import threading
import time

T_MAIN = time.time()

# Extra site folders (the host's venv bound into the container, a folder
# holding torch_memory_saver): processed like site-packages (.pth files too)
# and put first, ahead of the interpreter's own dist-packages, as in the venv.
_before = list(sys.path)
for _d in filter(None, os.environ.get("ENGINE_SITE", "").split(":")):
    site.addsitedir(_d)
sys.path[:] = [p for p in sys.path if p not in _before] + _before

# images/engine_http.py: beside this file in the image, one folder up in the repo.
_here = os.path.dirname(os.path.abspath(__file__))
sys.path.append(_here if os.path.isfile(os.path.join(_here, "engine_http.py")) else os.path.dirname(_here))
import engine_http  # noqa: E402

TAGS = ("weights", "kv_cache", "cuda_graph")  # SGLang's GPU memory types
MAX_NEW_TOKENS = 4096
GB = 1000 ** 3

# Qwen2.5 shapes (hidden, heads, kv heads, head dim, MLP, vocab, tied head).
SHAPES = {
    "tiny": dict(hidden=256, heads=4, kv_heads=2, head_dim=64, inter=512,
                 vocab=4096, tie=True, theta=10000.0, eps=1e-6),  # tests
    "0.5b": dict(hidden=896, heads=14, kv_heads=2, head_dim=64, inter=4864,
                 vocab=151936, tie=True, theta=1000000.0, eps=1e-6),
    "7b": dict(hidden=3584, heads=28, kv_heads=4, head_dim=128, inter=18944,
               vocab=152064, tie=False, theta=1000000.0, eps=1e-6),
    "32b": dict(hidden=5120, heads=40, kv_heads=8, head_dim=128, inter=27648,
                vocab=152064, tie=False, theta=1000000.0, eps=1e-6),
}


# Weight reload: pieces of LOAD_CHUNK bytes through LOAD_BUFFERS pinned
# buffers, each filled by its own reader thread.
LOAD_CHUNK = 64 << 20
LOAD_BUFFERS = 8
# Weight set reload (ENGINE_WEIGHT_SET): CUDA streams for the copies; reloads kept in /state.
SET_STREAMS = 4
RELOADS_KEPT = 20


log = engine_http.logger("gpu-engine")
check = engine_http.check


def env_num(env, name, default, kind=float):
    raw = env.get(name, "")
    try:
        return kind(raw) if raw.strip() else default
    except ValueError:
        raise SystemExit(f"gpu-engine: {name}={raw!r} is not a number")


# ---- model configuration (no torch) ------------------------------------------

def param_shapes(cfg):
    """[(name, shape)] in file order, Hugging Face Qwen2 names."""
    h, d, i = cfg["hidden"], cfg["head_dim"], cfg["inter"]
    q, kv = cfg["heads"] * d, cfg["kv_heads"] * d
    out = [("model.embed_tokens.weight", (cfg["vocab"], h))]
    for n in range(cfg["layers"]):
        p = f"model.layers.{n}."
        out += [(p + "input_layernorm.weight", (h,)),
                (p + "self_attn.q_proj.weight", (q, h)), (p + "self_attn.q_proj.bias", (q,)),
                (p + "self_attn.k_proj.weight", (kv, h)), (p + "self_attn.k_proj.bias", (kv,)),
                (p + "self_attn.v_proj.weight", (kv, h)), (p + "self_attn.v_proj.bias", (kv,)),
                (p + "self_attn.o_proj.weight", (h, q)),
                (p + "post_attention_layernorm.weight", (h,)),
                (p + "mlp.gate_proj.weight", (i, h)), (p + "mlp.up_proj.weight", (i, h)),
                (p + "mlp.down_proj.weight", (h, i))]
    out.append(("model.norm.weight", (h,)))
    if not cfg["tie"]:
        out.append(("lm_head.weight", (cfg["vocab"], h)))
    return out


def numel(shape):
    n = 1
    for s in shape:
        n *= s
    return n


def model_config(environ=None):
    """The model the environment asks for: shape family by size, layers to
    reach ENGINE_PARAMS_GB of bf16 weights (or ENGINE_LAYERS)."""
    e = os.environ if environ is None else environ
    gb = env_num(e, "ENGINE_PARAMS_GB", 1.0)
    layers = env_num(e, "ENGINE_LAYERS", 0, int)
    seed = env_num(e, "ENGINE_SEED", 1234, int)
    ctx = env_num(e, "ENGINE_CONTEXT_LEN", 4096, int)
    kv_gb = env_num(e, "ENGINE_KV_GB", 1.0)
    shape = e.get("ENGINE_SHAPE", "auto") or "auto"
    if shape == "auto":
        shape = "0.5b" if gb < 4 else "7b" if gb < 40 else "32b"
    if shape not in SHAPES:
        raise SystemExit(f"gpu-engine: ENGINE_SHAPE={shape!r}: want auto or one of {', '.join(SHAPES)}")
    if gb <= 0 and layers <= 0:
        raise SystemExit("gpu-engine: ENGINE_PARAMS_GB must be > 0 (or set ENGINE_LAYERS)")
    cfg = dict(SHAPES[shape], shape=shape, seed=seed, layers=1)
    fixed = sum(numel(s) for _, s in param_shapes(dict(cfg, layers=0)))
    per_layer = sum(numel(s) for _, s in param_shapes(cfg)) - fixed
    if layers <= 0:
        layers = max(1, round((gb * GB / 2 - fixed) / per_layer))
    cfg["layers"] = layers
    cfg["params"] = fixed + layers * per_layer
    cfg["weights_bytes"] = cfg["params"] * 2
    cfg["context_len"] = max(16, ctx)
    kv_token_bytes = layers * 2 * cfg["kv_heads"] * cfg["head_dim"] * 2
    cfg["kv_tokens"] = max(cfg["context_len"], int(kv_gb * GB) // kv_token_bytes)
    cfg["kv_bytes"] = cfg["kv_tokens"] * kv_token_bytes
    cfg["model_id"] = f"rekindle-qwen2-{shape}-L{layers}-seed{seed}"
    return cfg


def weights_path(cfg, environ=None):
    e = os.environ if environ is None else environ
    if e.get("ENGINE_WEIGHTS"):
        return e["ENGINE_WEIGHTS"]
    return os.path.join(e.get("ENGINE_WEIGHTS_DIR") or "/weights", cfg["model_id"] + ".safetensors")


# ---- tokens <-> text (a byte-level stand-in for a tokenizer) ------------------

_C = "bdfgklmnprstvz"
_V = "aeiou"
SYLLABLES = [c + v for c in _C for v in _V]  # 70


def tokenize(text):
    return list(text.encode("utf-8"))


def token_word(t):
    s = ""
    while True:
        s = SYLLABLES[t % 70] + s
        t //= 70
        if t == 0:
            return s


def detokenize(ids):
    return " ".join(token_word(t) for t in ids)


# ---- safetensors (written and read here, no package needed) -------------------

def token_ids(x, vocab):
    """x is a non-empty list of token ids below vocab."""
    return isinstance(x, list) and bool(x) and all(isinstance(t, int) and 0 <= t < vocab for t in x)


def safetensors_header(entries, metadata):
    """entries: [(name, shape)] of bf16 tensors in file order. Returns
    (header bytes incl. the 8-byte length, {name: (offset, nbytes)})."""
    head = {"__metadata__": {k: str(v) for k, v in metadata.items()}}
    where, off = {}, 0
    for name, shape in entries:
        n = numel(shape) * 2
        head[name] = {"dtype": "BF16", "shape": list(shape), "data_offsets": [off, off + n]}
        where[name] = (off, n)
        off += n
    raw = json.dumps(head, separators=(",", ":")).encode()
    raw += b" " * (-len(raw) % 8)
    return struct.pack("<Q", len(raw)) + raw, where


def read_safetensors_header(f):
    """(metadata, {name: (dtype, shape, offset, nbytes)}, data start) of an open file."""
    n = struct.unpack("<Q", f.read(8))[0]
    if n > 64 << 20:
        raise ValueError(f"safetensors header of {n} bytes: not a safetensors file")
    head = json.loads(f.read(n))
    meta = head.pop("__metadata__", {}) or {}
    out = {k: (v["dtype"], tuple(v["shape"]), v["data_offsets"][0],
               v["data_offsets"][1] - v["data_offsets"][0]) for k, v in head.items()}
    return meta, out, 8 + n


def config_meta(cfg):
    """The model configuration a weights file records (rekindle.config)."""
    return json.dumps({k: cfg[k] for k in ("shape", "layers", "seed", "hidden", "vocab", "params")})


def file_checksum(path):
    """The checksum a weights file records, or None (no file, none recorded,
    unreadable: the file load itself then says what is wrong)."""
    try:
        with open(path, "rb") as f:
            return read_safetensors_header(f)[0].get("rekindle.checksum")
    except (OSError, ValueError, KeyError, struct.error):
        return None


# ---- weight sets (rekindle-weights), chosen without torch -------------------

def weight_set_module():
    """integrations/weights/rekindle_weights.py: beside server.py in the image
    (/engine), in ../../integrations/weights in the repo; None when neither
    has it."""
    try:
        import rekindle_weights
        return rekindle_weights
    except ImportError:
        d = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "integrations", "weights")
        if not os.path.isfile(os.path.join(d, "rekindle_weights.py")):
            return None
        sys.path.append(os.path.abspath(d))
        import rekindle_weights
        return rekindle_weights


def select_weight_set(set_dir, cfg, expected_checksum):
    """(WeightSet, None) when the set at set_dir holds this model's weights,
    else (None, why and how to fix). expected_checksum: the one the engine
    holds to (its weights file's, or the loaded weights'); None when it has
    none yet, and then the set's recorded configuration must be this model's."""
    rw = weight_set_module()
    if rw is None:
        return None, "rekindle_weights.py is not beside server.py: rebuild the gpu-engine image"
    ws, why = rw.probe(set_dir)
    if ws is None:
        return None, why
    want = dict(param_shapes(cfg))
    if set(ws.tensors) != set(want):
        missing, extra = sorted(set(want) - set(ws.tensors)), sorted(set(ws.tensors) - set(want))
        return None, (f"weight set {set_dir} holds other tensors than model {cfg['model_id']} "
                      f"({len(missing)} missing, e.g. {missing[:1]}; {len(extra)} extra, e.g. {extra[:1]}): "
                      f"load the set from this model's weights file")
    for name, shape in want.items():
        info = ws.tensors[name]
        if info.dtype != "BF16" or info.shape != tuple(shape):
            return None, (f"weight set {set_dir}: {name} is {info.dtype}{list(info.shape)}, model "
                          f"{cfg['model_id']} wants BF16{list(shape)}: load the set from this model's weights file")
    try:
        got, conf = ws.meta("rekindle.checksum"), ws.meta("rekindle.config")
    except rw.SetError as e:
        return None, str(e)
    if not got:
        return None, (f"weight set {set_dir} records no rekindle.checksum: load it from a weights "
                      f"file written by server.py make-weights")
    if expected_checksum and got != expected_checksum:
        return None, (f"weight set {set_dir} records checksum {got[:16]}, the engine's weights are "
                      f"{expected_checksum[:16]}: the set holds other weights; load it again from the engine's file")
    if not expected_checksum:
        try:
            same = conf is not None and json.loads(conf) == json.loads(config_meta(cfg))
        except ValueError:
            same = False
        if not same:
            return None, (f"weight set {set_dir} was made for another model ({conf}), not "
                          f"{cfg['model_id']}: load the set from this model's weights file")
    return ws, None


# ---- torch_memory_saver's preload hook, found without importing torch ---------

def preload_env():
    """(hook library for LD_PRELOAD, folder of the libcudart it needs) for the
    torch on sys.path, or (None, None) when torch_memory_saver is not installed.
    torch_memory_saver picks the _cu<major> build by torch.version.cuda; so do we."""
    spec = importlib.util.find_spec("torch_memory_saver")
    tspec = importlib.util.find_spec("torch")
    if spec is None or not spec.submodule_search_locations or tspec is None:
        return None, None
    pkg = list(spec.submodule_search_locations)[0]
    tdir = list(tspec.submodule_search_locations)[0]
    major = None
    try:
        with open(os.path.join(tdir, "version.py")) as f:
            m = re.search(r"^cuda\s*(?::[^=]*)?=\s*['\"](\d+)", f.read(), re.M)
            major = m.group(1) if m else None
    except OSError:
        pass
    names = [f"torch_memory_saver_hook_mode_preload_cu{major}.*.so"] if major else []
    names.append("torch_memory_saver_hook_mode_preload.*.so")
    hook = None
    for pat in names:
        found = sorted(glob.glob(os.path.join(pkg, pat)) + glob.glob(os.path.join(os.path.dirname(pkg), pat)))
        if found:
            hook = found[0]
            break
    libdir = None
    sitedir = os.path.dirname(tdir)
    for pat in ([f"nvidia/cu{major}/lib/libcudart.so.{major}*", f"nvidia/cuda_runtime/lib/libcudart.so.{major}*"]
                if major else []) + ["nvidia/*/lib/libcudart.so.*"]:
        found = sorted(glob.glob(os.path.join(sitedir, pat)))
        if found:
            libdir = os.path.dirname(found[0])
            break
    return hook, libdir


def ensure_preload():
    """Re-exec with torch_memory_saver's hook preloaded, as SGLang starts its
    scheduler processes under configure_subprocess(). A launcher that runs
    us through another dynamic loader (launch.sh) must set it itself."""
    if os.environ.get("ENGINE_MEMORY_SAVER", "1") == "0":
        return
    if "torch_memory_saver" in os.environ.get("LD_PRELOAD", ""):
        return
    hook, libdir = preload_env()
    if hook is None:
        raise SystemExit("gpu-engine: torch_memory_saver is not installed for this python "
                         "(pip install torch-memory-saver, or add its folder to ENGINE_SITE); "
                         "ENGINE_MEMORY_SAVER=0 runs without it")
    if os.environ.get("ENGINE_LAUNCHER"):
        raise SystemExit(f"gpu-engine: {os.environ['ENGINE_LAUNCHER']} did not set LD_PRELOAD={hook}")
    env = dict(os.environ)
    env["LD_PRELOAD"] = ":".join(filter(None, [hook, env.get("LD_PRELOAD")]))
    if libdir:
        env["LD_LIBRARY_PATH"] = ":".join(filter(None, [libdir, env.get("LD_LIBRARY_PATH")]))
    env["ENGINE_T_EXEC"] = str(T_MAIN)
    os.execve(sys.executable, [sys.executable] + sys.argv, env)


def process_start_time():
    """Wall-clock time the process was started (exec'd), from /proc."""
    try:
        with open("/proc/self/stat") as f:
            ticks = int(f.read().rsplit(")", 1)[1].split()[19])
        with open("/proc/stat") as f:
            btime = next(int(l.split()[1]) for l in f if l.startswith("btime"))
        return btime + ticks / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, StopIteration, IndexError):
        return T_MAIN


# ---- the driver, for what the GPU is *now* (after a restore it may differ) -----

def gpu_identity():
    """UUID and PCI bus id of CUDA device 0, asked from the driver each time
    (torch caches device properties; a restore may have moved us)."""
    try:
        cuda = ctypes.CDLL("libcuda.so.1")
        dev = ctypes.c_int()
        if cuda.cuDeviceGet(ctypes.byref(dev), 0) != 0:
            return {}
        raw = (ctypes.c_ubyte * 16)()
        fn = getattr(cuda, "cuDeviceGetUuid_v2", None) or cuda.cuDeviceGetUuid
        if fn(raw, dev) != 0:
            return {}
        h = bytes(raw).hex()
        uuid = f"GPU-{h[0:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:32]}"
        bus = ctypes.create_string_buffer(32)
        cuda.cuDeviceGetPCIBusId(bus, 32, dev)
        name = ctypes.create_string_buffer(128)
        cuda.cuDeviceGetName(name, 128, dev)
        return {"gpu_uuid": uuid, "gpu_pci_bus_id": bus.value.decode(), "gpu_name": name.value.decode()}
    except (OSError, AttributeError):
        return {}


# ---- the model -----------------------------------------------------------------

class Model:
    """Weights, KV cache and the decode step. Every method runs on the worker thread."""

    def __init__(self, cfg, path, use_saver, use_graph, phases, set_dir=None):
        t = time.time()
        import torch
        import torch.nn.functional as F
        self.torch, self.F = torch, F
        self.saver = None
        if use_saver:
            import torch_memory_saver
            self.saver = torch_memory_saver.torch_memory_saver
        self._import_backend()
        phases["import_s"] = round(time.time() - t, 3)

        t = time.time()
        if os.environ.get("ENGINE_DEVICE") == "cpu":  # unit tests without a GPU
            self.dev = torch.device("cpu")
            self.saver, use_graph = None, False
        else:
            torch.cuda.init()
            self.dev = torch.device("cuda", torch.cuda.current_device())
        torch.empty(1, device=self.dev)  # creates the context
        phases["cuda_init_s"] = round(time.time() - t, 3)

        self.cfg, self.path, self.phases = cfg, path, phases
        self.paused = set()
        self.cached_ids = []  # tokens whose K/V sit in the cache, in order
        t = time.time()
        self._alloc_weights()
        phases["weights_alloc_s"] = round(time.time() - t, 3)
        self._fill_weights(set_dir)
        t = time.time()
        self._alloc_kv()
        self._sync()
        phases["kv_alloc_s"] = round(time.time() - t, 3)
        self._prepare_step(use_graph)

    # -- start-up steps (a backend may replace any of them) --

    def _import_backend(self):
        pass

    def param_names(self):
        return [n for n, _ in param_shapes(self.cfg)]

    def _alloc_weights(self):
        """self.w: name -> tensor for every name in param_shapes, allocated
        inside the "weights" region, contents undefined."""
        torch, bf16 = self.torch, self.torch.bfloat16
        with self._region("weights"):
            self.w = {n: torch.empty(s, dtype=bf16, device=self.dev) for n, s in param_shapes(self.cfg)}
        if self.cfg["tie"]:
            self.w["lm_head.weight"] = self.w["model.embed_tokens.weight"]

    def _fill_weights(self, set_dir):
        """Fill self.w: from the weight set, else the file, else generate and
        write the file."""
        cfg, path, phases = self.cfg, self.path, self.phases
        # A weight set (ENGINE_WEIGHT_SET) first: mapped and registered once,
        # here, so that every resume after a restore copies at PCIe speed.
        self.set_dir, self.wset, self.wset_reason, self.wset_register_s = set_dir, None, None, None
        self.reloads = []  # the last RELOADS_KEPT reloads, for /state
        self.expected_checksum = file_checksum(path) if os.path.exists(path) else None
        loaded = False
        if set_dir and self.attach_set():
            phases["weights_set_register_s"] = self.wset_register_s
            t = time.time()
            try:
                want = self.expected_checksum or self.wset.meta("rekindle.checksum")
                got, n, copy_s, _ = self._load_from_set(want)
                self.expected_checksum, loaded = got, True
                phases["weights_source"] = "weight-set"
                phases["weights_load_s"] = round(time.time() - t, 3)
                phases["weights_load_gbps"] = round(n / GB / max(phases["weights_load_s"], 1e-9), 2)
                phases["weights_copy_gbps"] = round(n / GB / max(copy_s, 1e-9), 2)
            except (OSError, ValueError) + self._set_errors() as e:
                self.drop_set(str(e))
        if loaded:
            pass  # from the set
        elif os.path.exists(path):
            if set_dir:
                log(f"weights: loading from the file {path}, not the weight set: {self.wset_reason}")
            t = time.time()
            self.expected_checksum = self.load_weights()
            phases["weights_source"] = "file"
            phases["weights_load_s"] = round(time.time() - t, 3)
            phases["weights_load_gbps"] = round(cfg["weights_bytes"] / GB / max(phases["weights_load_s"], 1e-9), 2)
        else:
            if set_dir:
                log(f"weights: generating them (no file {path}), not loading the weight set: {self.wset_reason}")
            t = time.time()
            self.init_weights()
            phases["weights_source"] = "generated"
            phases["weights_init_s"] = round(time.time() - t, 3)
            t = time.time()
            self.expected_checksum = self.checksum()
            self.write_weights(path, self.expected_checksum)
            phases["weights_write_s"] = round(time.time() - t, 3)
        self.loaded_checksum = self.expected_checksum

    def _alloc_kv(self):
        """The static KV cache, in its own region; rotary tables and the decode
        step's inputs stay outside every region (small, never released)."""
        torch, cfg, bf16 = self.torch, self.cfg, self.torch.bfloat16
        with self._region("kv_cache"):
            self.kv = torch.zeros(cfg["layers"], 2, cfg["kv_tokens"], cfg["kv_heads"], cfg["head_dim"],
                                  dtype=bf16, device=self.dev)
        d = cfg["head_dim"]
        inv = 1.0 / (cfg["theta"] ** (torch.arange(0, d, 2, device=self.dev, dtype=torch.float32) / d))
        f = torch.outer(torch.arange(cfg["context_len"], device=self.dev, dtype=torch.float32), inv)
        f = torch.cat((f, f), dim=-1)
        self.cos, self.sin = f.cos(), f.sin()
        self.ctx_pos = torch.arange(cfg["context_len"], device=self.dev)
        self.tok_in = torch.zeros(1, dtype=torch.long, device=self.dev)
        self.pos_in = torch.zeros(1, dtype=torch.long, device=self.dev)

    def _prepare_step(self, use_graph):
        """Warm up (cuBLAS handles, kernels) on a side stream, then capture."""
        torch, phases = self.torch, self.phases
        t = time.time()
        if self.cuda:
            s = torch.cuda.Stream()
            s.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(s):
                for _ in range(3):
                    out = self._step()
            torch.cuda.current_stream().wait_stream(s)
        else:
            out = self._step()
        self._sync()
        phases["warmup_s"] = round(time.time() - t, 3)
        self.graph = None
        if use_graph:
            t = time.time()
            self.graph = torch.cuda.CUDAGraph()
            if self.saver is not None:
                ctx = self.saver.cuda_graph(cuda_graph=self.graph, tag="cuda_graph")
            else:
                ctx = torch.cuda.graph(self.graph)
            with ctx:
                self.tok_out = self._step()
            self._sync()
            phases["graph_capture_s"] = round(time.time() - t, 3)
        else:
            self.tok_out = out
        self.kv.zero_()

    @property
    def cuda(self):
        return self.dev.type == "cuda"

    def _sync(self):
        if self.cuda:
            self.torch.cuda.synchronize()

    def _region(self, tag):
        if self.saver is None:
            import contextlib
            return contextlib.nullcontext()
        return self.saver.region(tag=tag)

    # -- weights --

    def init_weights(self):
        torch = self.torch
        g = torch.Generator(device=self.dev)
        for i, (name, shape) in enumerate(param_shapes(self.cfg)):
            t = self.w[name]
            if name.endswith("norm.weight"):
                t.fill_(1.0)
                continue
            # Projections at 1/sqrt(fan-in): every layer moves the residual
            # stream by about as much as it holds, so the next token depends
            # on all the weights (a small init just echoes the embedding).
            std = shape[1] ** -0.5 if len(shape) == 2 and not name.startswith("model.embed") else 0.02
            g.manual_seed(self.cfg["seed"] * 1000003 + i)
            t.normal_(0.0, std, generator=g)
        self._sync()

    def checksum(self):
        """SHA-256 over per-chunk sums of the bf16 bit patterns, computed on the
        GPU: changes when any weight changes or moves to another row."""
        torch = self.torch
        width, rows = 64, 1 << 18
        wgt = torch.arange(rows, device=self.dev, dtype=torch.long) % 65521 + 1
        sums = []
        for name, _ in param_shapes(self.cfg):
            flat = self.w[name].view(-1).view(torch.int16)
            main = flat.numel() - flat.numel() % width
            for a in range(0, main, width * rows):
                chunk = flat[a:min(main, a + width * rows)].view(-1, width)
                r = chunk.sum(dim=1, dtype=torch.long)
                sums.append(torch.stack((r.sum(), (r * wgt[:r.numel()]).sum())))
            if main < flat.numel():
                tail = flat[main:].to(torch.long)
                sums.append(torch.stack((tail.sum(), tail.sum())))
        vals = torch.stack(sums).tolist()
        return hashlib.sha256(json.dumps(vals).encode()).hexdigest()

    def write_weights(self, path, checksum):
        torch = self.torch
        entries = param_shapes(self.cfg)
        meta = {"format": "pt", "rekindle.checksum": checksum,
                "rekindle.config": config_meta(self.cfg)}
        head, _ = safetensors_header(entries, meta)
        os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
        tmp = f"{path}.tmp-{os.getpid()}"
        chunk = 256 << 20
        with open(tmp, "wb") as f:
            f.write(head)
            for name, _ in entries:
                flat = self.w[name].view(-1).view(torch.uint8)
                for a in range(0, flat.numel(), chunk):
                    f.write(flat[a:a + chunk].cpu().numpy())
        os.replace(tmp, path)
        log(f"wrote {path}: {self.cfg['weights_bytes'] / GB:.2f} GB, checksum {checksum[:16]}")

    def _set_errors(self):
        rw = weight_set_module()
        return (rw.SetError, rw.Unavailable) if rw else ()

    def attach_set(self):
        """Use the weight set at self.set_dir when it holds our weights: map it
        and register it, once; it stays mapped and registered for the
        engine's life (release, checkpoint and restore included). False, with
        self.wset_reason saying why, when it cannot be used."""
        ws, why = select_weight_set(self.set_dir, self.cfg, self.expected_checksum)
        if ws is None:
            self.wset_reason = why
            return False
        try:
            ws.map()
            reg = ws.register(self.dev) if self.cuda else 0.0
        except (OSError,) + self._set_errors() as e:
            ws.close()
            self.wset_reason = f"weight set {self.set_dir}: {e}"
            return False
        self.wset, self.wset_reason = ws, None
        self.wset_register_s = round(reg, 3)
        log(f"weights: weight set {ws.name} at {self.set_dir}: {ws.bytes / GB:.2f} GB in {len(ws.files)} "
            f"file(s), mapped read-only, registered in {reg:.3f}s"
            f"{' (read-only registration)' if ws.read_only_registration else ''}")
        return True

    def drop_set(self, why):
        """Stop using the attached set (it failed a load): unregister, unmap."""
        log(f"weights: dropping the weight set: {why}")
        if self.wset is not None:
            self.wset.close()
        self.wset, self.wset_reason = None, why

    def _load_from_set(self, want_sum):
        """Copy the set into the weight tensors and check the GPU checksum.
        Returns (checksum, bytes, copy seconds, checksum seconds)."""
        names = [n for n, _ in param_shapes(self.cfg)]
        n, copy_s = self.wset.copy_into({k: self.w[k] for k in names}, streams=SET_STREAMS)
        self._sync()
        t = time.time()
        got = self.checksum()
        sum_s = time.time() - t
        if got != want_sum:
            raise ValueError(f"weight set {self.set_dir}: weights checksum {got[:16]} after the copy, "
                             f"want {(want_sum or '?')[:16]}: the set changed; load it again")
        return got, n, copy_s, sum_s

    def reload_weights(self):
        """Fill the (just resumed) weight tensors: from the weight set when one
        is attached (or can be now: the service may have loaded it since),
        else from the file, saying why in one log line. Returns (checksum,
        stats for /state)."""
        st = {}
        if self.wset is None and self.set_dir and self.attach_set():
            st["weights_set_register_s"] = self.wset_register_s
        t = time.time()
        got = None
        if self.wset is not None:
            try:
                got, n, copy_s, sum_s = self._load_from_set(self.expected_checksum)
                source = "weight-set"
            except (OSError, ValueError) + self._set_errors() as e:
                self.drop_set(str(e))
        if got is None:
            if self.set_dir:
                log(f"weights: reloading from the file {self.path}, not the weight set: {self.wset_reason}")
            t = time.time()
            got = self.load_weights()
            n, sum_s, source = self.cfg["weights_bytes"], self.checksum_seconds, "file"
            copy_s = time.time() - t - sum_s
        total = time.time() - t
        st.update(weights_source=source, weights_reload_bytes=n,
                  weights_reload_s=round(total, 3), weights_reload_gbps=round(n / GB / max(total, 1e-9), 2),
                  weights_copy_s=round(copy_s, 3), weights_copy_gbps=round(n / GB / max(copy_s, 1e-9), 2),
                  weights_checksum_s=round(sum_s, 3))
        self.reloads = (self.reloads + [dict(st, at=round(time.time(), 3))])[-RELOADS_KEPT:]
        return got, st

    def weight_set_state(self):
        ws = self.wset
        return {"dir": self.set_dir, "attached": ws is not None, "reason": self.wset_reason,
                "name": ws.name if ws else None, "bytes": ws.bytes if ws else None,
                "files": ws.files if ws else None, "registered": bool(ws and ws.registered),
                "read_only_registration": ws.read_only_registration if ws else None,
                "register_s": self.wset_register_s}

    def load_weights(self):
        """Read the file into the (allocated, possibly just resumed) weight
        tensors; check names and shapes, then the checksum. Returns it."""
        torch = self.torch
        with open(self.path, "rb", buffering=0) as f:
            meta, table, start = read_safetensors_header(f)
            want = dict(param_shapes(self.cfg))
            if set(table) != set(want):
                raise ValueError(f"{self.path}: tensors differ from model {self.cfg['model_id']}")
            pieces = []  # (destination bytes, file offset, length, tensor name)
            for name, (dtype, shape, off, n) in sorted(table.items(), key=lambda kv: kv[1][2]):
                if dtype != "BF16" or shape != tuple(want[name]):
                    raise ValueError(f"{self.path}: {name} is {dtype}{list(shape)}, want BF16{list(want[name])}")
                dst = self.w[name].view(-1).view(torch.uint8)
                for a in range(0, n, LOAD_CHUNK):
                    m = min(LOAD_CHUNK, n - a)
                    pieces.append((dst[a:a + m], start + off + a, m, name))
            self._copy_in(f.fileno(), pieces)
        self._sync()
        t = time.time()
        got = self.checksum()
        self.checksum_seconds = round(time.time() - t, 3)
        want_sum = meta.get("rekindle.checksum")
        if want_sum and got != want_sum:
            raise ValueError(f"{self.path}: weights checksum {got[:16]} != recorded {want_sum[:16]}")
        return got

    def _copy_in(self, fd, pieces):
        """Copy file pieces into device tensors through LOAD_BUFFERS pinned
        host buffers: reader threads fill some while the GPU copies out of
        others on a side stream, so a reload runs at the slower of file read
        and host-to-device copy, not at their sum (a single pageable buffer
        reached 2.3 GB/s on an H100 whose pinned copies run at 52 GB/s)."""
        torch = self.torch
        cuda = self.dev.type == "cuda"
        nbuf = min(LOAD_BUFFERS, len(pieces)) or 1
        bufs = [torch.empty(LOAD_CHUNK, dtype=torch.uint8, pin_memory=cuda) for _ in range(nbuf)]
        views = [memoryview(b.numpy()) for b in bufs]
        stream = torch.cuda.Stream(self.dev) if cuda else None
        done = [None] * nbuf  # event: the copy out of buffer b has finished

        def read(b, off, m, name):
            got = 0
            while got < m:
                k = os.preadv(fd, [views[b][got:m]], off + got)
                if not k:
                    raise ValueError(f"{self.path}: truncated in {name}")
                got += k

        def submit(pool, i):
            b = i % nbuf
            if done[b] is not None:
                done[b].synchronize()
            _, off, m, name = pieces[i]
            return pool.submit(read, b, off, m, name)

        try:
            with concurrent.futures.ThreadPoolExecutor(nbuf, thread_name_prefix="weights-read") as pool:
                reads = [submit(pool, i) for i in range(nbuf)]
                for i, (dst, _, m, _) in enumerate(pieces):
                    b = i % nbuf
                    reads[b].result()
                    if cuda:
                        with torch.cuda.stream(stream):
                            dst.copy_(bufs[b][:m], non_blocking=True)
                            done[b] = torch.cuda.Event()
                            done[b].record(stream)
                    else:
                        dst.copy_(bufs[b][:m])
                    if i + nbuf < len(pieces):
                        reads[b] = submit(pool, i + nbuf)
        finally:
            if cuda:
                stream.synchronize()  # no copy may still read a buffer freed below
            del views, bufs
            if cuda and hasattr(torch._C, "_host_emptyCache"):
                # Give the pinned buffers back: cached, they would be dumped
                # with the process at the next checkpoint.
                torch._C._host_emptyCache()

    # -- forward --

    def _rms(self, x, w):
        xf = x.float()
        xf = xf * self.torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + self.cfg["eps"])
        return w * xf.to(x.dtype)

    def _rope(self, x, cos, sin):
        half = x.shape[-1] // 2
        rot = self.torch.cat((-x[..., half:], x[..., :half]), dim=-1)
        return (x.float() * cos + rot.float() * sin).to(x.dtype)

    def _step(self):
        """One decode step for token tok_in at position pos_in: writes its K/V
        into the cache and returns the argmax of the next-token logits.
        Shapes are static, so it is captured as a CUDA graph."""
        torch, F, c, w = self.torch, self.F, self.cfg, self.w
        H, KV, D = c["heads"], c["kv_heads"], c["head_dim"]
        G, T = H // KV, c["context_len"]
        pos = self.pos_in
        cos = self.cos.index_select(0, pos).view(1, 1, D)
        sin = self.sin.index_select(0, pos).view(1, 1, D)
        masked = (self.ctx_pos > pos).view(1, 1, T)
        x = F.embedding(self.tok_in, w["model.embed_tokens.weight"])  # [1, hidden]
        for n in range(c["layers"]):
            p = f"model.layers.{n}."
            h = self._rms(x, w[p + "input_layernorm.weight"])
            q = F.linear(h, w[p + "self_attn.q_proj.weight"], w[p + "self_attn.q_proj.bias"]).view(1, H, D)
            k = F.linear(h, w[p + "self_attn.k_proj.weight"], w[p + "self_attn.k_proj.bias"]).view(1, KV, D)
            v = F.linear(h, w[p + "self_attn.v_proj.weight"], w[p + "self_attn.v_proj.bias"]).view(1, KV, D)
            q, k = self._rope(q, cos, sin), self._rope(k, cos, sin)
            ck, cv = self.kv[n, 0], self.kv[n, 1]  # [tokens, KV, D]
            ck.index_copy_(0, pos, k)
            cv.index_copy_(0, pos, v)
            keys = ck[:T].permute(1, 2, 0)     # [KV, D, T]
            vals = cv[:T].permute(1, 0, 2)     # [KV, T, D]
            scores = torch.bmm(q.view(KV, G, D), keys).float() * (D ** -0.5)  # [KV, G, T]
            probs = torch.softmax(scores.masked_fill(masked, float("-inf")), dim=-1).to(q.dtype)
            o = torch.bmm(probs, vals).reshape(1, H * D)
            x = x + F.linear(o, w[p + "self_attn.o_proj.weight"])
            h = self._rms(x, w[p + "post_attention_layernorm.weight"])
            gate = F.linear(h, w[p + "mlp.gate_proj.weight"])
            up = F.linear(h, w[p + "mlp.up_proj.weight"])
            x = x + F.linear(F.silu(gate) * up, w[p + "mlp.down_proj.weight"])
        x = self._rms(x, w["model.norm.weight"])
        logits = F.linear(x, w["lm_head.weight"])
        return logits.argmax(dim=-1)

    def _run_step(self):
        if self.graph is not None:
            self.graph.replay()
            return self.tok_out
        return self._step()

    def generate(self, ids, n):
        torch = self.torch
        c = self.cfg
        if len(ids) + n > c["context_len"]:
            raise ValueError(f"prompt ({len(ids)} tokens) + max_new_tokens ({n}) exceeds the context of {c['context_len']}")
        p = 0
        for a, b in zip(self.cached_ids, ids[:-1]):
            if a != b:
                break
            p += 1
        self.cached_ids = self.cached_ids[:p]
        t0 = time.time()
        prompt = torch.tensor(ids[p:], dtype=torch.long, device=self.dev)
        out = torch.empty(n, dtype=torch.long, device=self.dev)
        for j in range(p, len(ids)):
            self.tok_in.copy_(prompt[j - p:j - p + 1])
            self.pos_in.fill_(j)
            nxt = self._run_step()
        out[0:1].copy_(nxt)
        for i in range(1, n):
            self.tok_in.copy_(out[i - 1:i])
            self.pos_in.fill_(len(ids) + i - 1)
            out[i:i + 1].copy_(self._run_step())
        out_ids = out.tolist()
        dt = time.time() - t0
        self.cached_ids = list(ids) + out_ids[:-1]
        return out_ids, p, dt

    def generate_batch(self, prompts, n):
        """The reference engine decodes one sequence at a time."""
        t0 = time.time()
        outs = [self.generate(ids, n)[0] for ids in prompts]
        return outs, time.time() - t0

    def backend_state(self):
        return {"backend": "reference"}

    # -- memory API --

    def gpu_memory(self):
        torch = self.torch
        if not self.cuda:
            return {"gpu_used_mib": 0, "gpu_total_mib": 0, "torch_allocated_mib": 0, "torch_reserved_mib": 0}
        free, total = torch.cuda.mem_get_info(self.dev)
        return {"gpu_used_mib": (total - free) >> 20, "gpu_total_mib": total >> 20,
                "torch_allocated_mib": torch.cuda.memory_allocated(self.dev) >> 20,
                "torch_reserved_mib": torch.cuda.memory_reserved(self.dev) >> 20}

    def release(self, tags):
        torch = self.torch
        t = time.time()
        self._sync()
        before = self.gpu_memory()["gpu_used_mib"]
        done = []
        if self.saver is None:
            log("release: torch_memory_saver is off (ENGINE_MEMORY_SAVER=0): nothing released")
        else:
            if "kv_cache" in tags and "kv_cache" not in self.paused:
                self.saver.pause("kv_cache")
                done.append("kv_cache")
            self.cached_ids = []  # the cache's content is gone: flush it
            if "weights" in tags and "weights" not in self.paused:
                self.saver.pause("weights")
                done.append("weights")
            if "cuda_graph" in tags and "cuda_graph" not in self.paused and self.graph is not None:
                self.saver.pause("cuda_graph")
                done.append("cuda_graph")
            self._sync()
        self.paused.update(done)
        after = self.gpu_memory()["gpu_used_mib"]
        return {"released": done, "time_s": round(time.time() - t, 3),
                "gpu_used_mib_before": before, "gpu_used_mib_after": after, "freed_mib": before - after}

    def resume(self, tags):
        torch = self.torch
        t0 = time.time()
        r = {"resumed": []}
        if "cuda_graph" in tags and "cuda_graph" in self.paused:
            self.saver.resume("cuda_graph")
            self.paused.discard("cuda_graph")
            r["resumed"].append("cuda_graph")
        if "weights" in tags and "weights" in self.paused:
            t = time.time()
            self.saver.resume("weights")
            r["weights_remap_s"] = round(time.time() - t, 3)
            try:
                got, st = self.reload_weights()
            except (OSError, ValueError):
                self.saver.pause("weights")  # stay released, as we were
                raise
            self.paused.discard("weights")
            r.update(st)  # weights_source, _reload_s (checksum included), _copy_s, _gbps, ...
            self.loaded_checksum = got
            r["resumed"].append("weights")
        if "kv_cache" in tags and "kv_cache" in self.paused:
            self.saver.resume("kv_cache")
            self.paused.discard("kv_cache")
            r["resumed"].append("kv_cache")
        self._sync()
        r["time_s"] = round(time.time() - t0, 3)
        r["gpu_used_mib_after"] = self.gpu_memory()["gpu_used_mib"]
        return r


# ---- the engine: one worker thread owns the GPU ----------------------------------

BACKENDS = ("reference", "transformers")


def model_class(environ=None):
    """Model, or Model with transformers' model code (hf_model.py)."""
    env = os.environ if environ is None else environ
    name = env.get("ENGINE_BACKEND", "").strip() or "reference"
    if name not in BACKENDS:
        raise SystemExit(f"gpu-engine: ENGINE_BACKEND={name!r}: want one of {', '.join(BACKENDS)}")
    if name == "reference":
        return Model
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import hf_model
    return type("TransformersModel", (hf_model.Transformers, Model), {})

class Engine:
    def __init__(self):
        self.cfg = model_config()
        self.model_class = model_class()
        self.path = weights_path(self.cfg)
        self.set_dir = os.environ.get("ENGINE_WEIGHT_SET") or None
        self.use_saver = os.environ.get("ENGINE_MEMORY_SAVER", "1") != "0"
        self.use_graph = os.environ.get("ENGINE_CUDA_GRAPH", "1") != "0"
        self.start_time = process_start_time()
        t_exec = float(os.environ.get("ENGINE_T_EXEC") or T_MAIN)
        self.phases = {"python_start_s": round(t_exec - self.start_time, 3)}
        if t_exec != T_MAIN:  # re-exec'd to preload torch_memory_saver's hook
            self.phases["preload_exec_s"] = round(T_MAIN - t_exec, 3)
        self.model = None
        self.error = None
        self.phase = "starting"
        self.jobs = queue.Queue()
        self.counters = {"releases": 0, "resumes": 0, "generations": 0}
        self.last_release = self.last_resume = None
        self.identity_at_start = {}
        self.ready = threading.Event()
        threading.Thread(target=self._work, name="gpu-worker", daemon=True).start()

    def _work(self):
        try:
            self.phase = "loading"
            log(f"model {self.cfg['model_id']}: {self.cfg['params'] / 1e9:.2f}B params, "
                f"{self.cfg['weights_bytes'] / GB:.2f} GB bf16, {self.cfg['layers']} layers, "
                f"KV cache {self.cfg['kv_bytes'] / GB:.2f} GB; weights {self.path}"
                f"{', weight set ' + self.set_dir if self.set_dir else ''}; "
                f"memory saver {'on' if self.use_saver else 'off'}, CUDA graph {'on' if self.use_graph else 'off'}")
            self.model = self.model_class(self.cfg, self.path, self.use_saver, self.use_graph, self.phases,
                                          set_dir=self.set_dir)
            self.phases["total_s"] = round(time.time() - self.start_time, 3)
            self.identity_at_start = gpu_identity()
            self.phase = "ready"
            log("cold start: " + " ".join(f"{k}={v}" for k, v in self.phases.items()))
            log(f"ready on {self.identity_at_start.get('gpu_uuid', '?')} "
                f"({self.identity_at_start.get('gpu_name', '?')}), weights checksum {self.model.expected_checksum[:16]}")
        except BaseException as e:  # the server reports it and exits
            self.error = f"{type(e).__name__}: {e}"
            self.phase = "failed"
            log(f"start failed: {self.error}")
        finally:
            self.ready.set()
        while True:
            fn, box, done = self.jobs.get()
            try:
                box["value"] = fn()
            except Exception as e:  # handed back to the HTTP thread
                box["error"] = e
            done.set()

    def call(self, fn, timeout=600):
        box, done = {}, threading.Event()
        self.jobs.put((fn, box, done))
        if not done.wait(timeout):
            raise TimeoutError("GPU worker busy")
        if "error" in box:
            raise box["error"]
        return box["value"]

    @property
    def loaded(self):
        return self.model is not None and not self.model.paused

    def generate(self, ids, n):
        def job():
            if not self.loaded:
                return None
            out, cached, dt = self.model.generate(ids, n)
            self.counters["generations"] += 1
            return out, cached, dt
        return self.call(job)

    def generate_batch(self, prompts, n):
        def job():
            if not self.loaded:
                return None
            outs, dt = self.model.generate_batch(prompts, n)
            self.counters["generations"] += 1
            return outs, dt
        return self.call(job)

    def flush(self):
        def job():
            if self.model is not None:
                self.model.cached_ids = []
        self.call(job)

    def release(self, tags):
        def job():
            r = self.model.release(tags)
            if r["released"]:
                self.counters["releases"] += 1
            self.last_release = r
            log(f"release {r}")
            return r
        return self.call(job)

    def resume(self, tags):
        def job():
            r = self.model.resume(tags)
            if r["resumed"]:
                self.counters["resumes"] += 1
            self.last_resume = r
            log(f"resume {r}")
            return r
        return self.call(job)

    def snapshot(self):
        base = {
            "phase": self.phase, "error": self.error, "loaded": self.loaded,
            "model_id": self.cfg["model_id"], "weights_path": self.path, "weight_set_dir": self.set_dir,
            "config": {k: self.cfg[k] for k in ("shape", "layers", "hidden", "heads", "kv_heads", "head_dim",
                                                "inter", "vocab", "params", "weights_bytes", "context_len",
                                                "kv_tokens", "kv_bytes", "seed")},
            "memory_saver": self.use_saver, "cuda_graph": self.use_graph,
            "cold_start": dict(self.phases), "pid": os.getpid(), "start_time": self.start_time,
            "uptime_s": round(time.time() - self.start_time, 3),
            "cuda_visible_devices": os.environ.get("CUDA_VISIBLE_DEVICES"),
            "dev_nvidia": sorted(os.path.basename(p) for p in glob.glob("/dev/nvidia[0-9]*")),
            "gpu_at_start": self.identity_at_start,
            "last_release": self.last_release, "last_resume": self.last_resume, **self.counters,
        }
        if self.model is None:
            return base

        def job():
            m = self.model
            return {"weights_checksum": m.expected_checksum, "loaded_checksum": m.loaded_checksum,
                    "paused": sorted(m.paused), "cached_tokens": len(m.cached_ids),
                    "weight_set": m.weight_set_state(), "reloads": list(m.reloads),
                    "engine": m.backend_state(),
                    **m.gpu_memory(), **gpu_identity()}
        base.update(self.call(job, timeout=60))
        return base


# ---- HTTP -------------------------------------------------------------------------

class Handler(engine_http.JSONHandler):
    server_version = "rekindle-gpu-engine/1"
    log = staticmethod(log)

    def do_GET(self):
        e = self.engine
        path = self.path.split("?")[0]
        if path in ("/health", "/health_generate"):
            if e.phase != "ready":
                self._reply(503, {"status": e.phase, "error": e.error})
            elif not e.loaded:
                self._reply(503, {"status": "released", "error": "memory released; POST /resume_memory_occupation"})
            else:
                self._reply(200, {"status": "ok"})
        elif path == "/state":
            try:
                self._reply(200, e.snapshot())
            except Exception as err:
                self._reply(500, {"error": f"{type(err).__name__}: {err}"})
        elif path == "/v1/models":
            self._reply(200, {"object": "list", "data": [{"id": e.cfg["model_id"], "object": "model",
                                                          "created": int(e.start_time), "owned_by": "rekindle"}]})
        elif path in ("/get_model_info", "/model_info"):
            self._reply(200, {"model_path": e.path, "model_id": e.cfg["model_id"], "is_generation": True,
                              "weights_checksum": e.model.expected_checksum if e.model else None})
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
        if e.phase != "ready":
            self._reply(503, {"status": e.phase, "error": e.error or "still starting"})
            return
        try:
            if path == "/generate":
                self._generate(body)
            elif path == "/v1/completions":
                self._completions(body)
            elif path == "/flush_cache":
                e.flush()
                self._reply(200, {"status": "ok", "message": "cache flushed"})
            elif path in ("/release_memory_occupation", "/resume_memory_occupation"):
                tags = body.get("tags") or list(TAGS)
                if not isinstance(tags, list) or any(t not in TAGS for t in tags):
                    self._reply(400, {"error": f"tags must be a list of {', '.join(TAGS)}"})
                    return
                if path.startswith("/release"):
                    r = e.release(tags)
                else:
                    try:
                        r = e.resume(tags)
                    except (OSError, ValueError) as err:
                        log(f"resume failed: {err}")
                        self._reply(500, {"status": "error", "error": str(err)})
                        return
                self._reply(200, {"status": "ok", "success": True, "loaded": e.loaded, **r})
            else:
                self._reply(404, {"error": f"no such endpoint: POST {path}"})
        except TimeoutError as err:
            self._reply(503, {"error": str(err)})
        except Exception as err:
            log(f"POST {path} failed: {type(err).__name__}: {err}")
            self._reply(500, {"error": f"{type(err).__name__}: {err}"})

    def _generate(self, body):
        sp = body.get("sampling_params") or {}
        n = body.get("max_new_tokens", sp.get("max_new_tokens", 16))
        if isinstance(body.get("input_ids"), list):
            ids = body["input_ids"]
            if not token_ids(ids, self.engine.cfg["vocab"]):
                self._reply(400, {"error": "input_ids must be a non-empty list of token ids"})
                return
        elif isinstance(body.get("text"), str) and body["text"]:
            ids = tokenize(body["text"])
        else:
            self._reply(400, {"error": 'body needs "text" (a non-empty string) or "input_ids"'})
            return
        if not isinstance(n, int) or not 0 < n <= MAX_NEW_TOKENS:
            self._reply(400, {"error": f"max_new_tokens must be an integer in 1..{MAX_NEW_TOKENS}"})
            return
        try:
            r = self.engine.generate(ids, n)
        except ValueError as err:
            self._reply(400, {"error": str(err)})
            return
        if r is None:
            self._reply(503, {"error": "memory released; POST /resume_memory_occupation first"})
            return
        out, cached, dt = r
        meta = {"id": hashlib.sha256(json.dumps([ids, n]).encode()).hexdigest()[:32],
                "prompt_tokens": len(ids), "completion_tokens": n, "cached_tokens": cached,
                "finish_reason": {"type": "length", "length": n}, "e2e_latency": round(dt, 4),
                "weights_checksum": self.engine.model.loaded_checksum}
        self._reply(200, {"text": detokenize(out), "output_ids": out, "tokens": out,
                          "meta_info": meta, "meta": meta})


    def _completions(self, body):
        """OpenAI's /v1/completions, greedy only: prompt is a string, a list
        of strings, a list of token ids or a list of such lists."""
        e = self.engine
        n = body.get("max_tokens", 16)
        if not isinstance(n, int) or not 0 < n <= MAX_NEW_TOKENS:
            self._reply(400, {"error": {"message": f"max_tokens must be an integer in 1..{MAX_NEW_TOKENS}",
                                        "type": "invalid_request_error"}})
            return
        bad = [k for k, ok in (("temperature", lambda v: v in (0, 0.0, None)), ("n", lambda v: v in (1, None)),
                               ("stream", lambda v: v in (False, None)), ("best_of", lambda v: v in (1, None)))
               if k in body and not ok(body[k])]
        if bad:
            self._reply(400, {"error": {"message": f"{', '.join(bad)}: this engine decodes greedily, one choice "
                                                   "per prompt, without streaming (temperature 0, n 1, stream false)",
                                        "type": "invalid_request_error"}})
            return
        p = body.get("prompt")
        vocab = e.cfg["vocab"]
        if isinstance(p, str) and p:
            prompts = [tokenize(p)]
        elif token_ids(p, vocab):
            prompts = [p]
        elif isinstance(p, list) and p and all(isinstance(x, str) and x for x in p):
            prompts = [tokenize(x) for x in p]
        elif isinstance(p, list) and p and all(token_ids(x, vocab) for x in p):
            prompts = list(p)
        else:
            self._reply(400, {"error": {"message": "prompt must be a non-empty string, list of strings, "
                                                   "list of token ids or list of such lists",
                                        "type": "invalid_request_error"}})
            return
        try:
            r = e.generate_batch(prompts, n)
        except ValueError as err:
            self._reply(400, {"error": {"message": str(err), "type": "invalid_request_error"}})
            return
        if r is None:
            self._reply(503, {"error": {"message": "memory released; POST /resume_memory_occupation first",
                                        "type": "unavailable"}})
            return
        outs, dt = r
        used = sum(len(x) for x in prompts)
        self._reply(200, {
            "id": "cmpl-" + hashlib.sha256(json.dumps([prompts, n]).encode()).hexdigest()[:24],
            "object": "text_completion", "created": int(time.time()), "model": e.cfg["model_id"],
            "choices": [{"index": i, "text": detokenize(o), "token_ids": o, "logprobs": None,
                         "finish_reason": "length"} for i, o in enumerate(outs)],
            "usage": {"prompt_tokens": used, "completion_tokens": n * len(outs),
                      "total_tokens": used + n * len(outs)},
            "latency_s": round(dt, 4)})


def serve():
    ensure_preload()
    host = os.environ.get("ENGINE_HOST", "0.0.0.0")
    port = int(os.environ.get("ENGINE_PORT", "30000"))
    log(f"pid {os.getpid()} python {sys.version.split()[0]} ({sys.executable}), port {port}")
    engine = Engine()
    Handler.engine = engine

    def watch():  # a failed start ends the process (after /health said why)
        engine.ready.wait()
        if engine.error:
            time.sleep(1)
            os._exit(1)
    engine_http.serve(host, port, Handler,
                      started=threading.Thread(target=watch, name="start-watch", daemon=True).start)


def main(argv):
    cmd = argv[1] if len(argv) > 1 else "serve"
    if cmd == "serve" and len(argv) <= 2:
        serve()
        return 0
    if cmd == "config":
        cfg = model_config()
        print(json.dumps(dict(cfg, weights_path=weights_path(cfg)), indent=1))
        return 0
    if cmd == "preload-env":
        hook, libdir = preload_env()
        if hook is None:
            print("torch_memory_saver (and torch) not found on sys.path", file=sys.stderr)
            return 1
        print(f"hook={hook}\nlibdir={libdir or ''}")
        return 0
    if cmd == "check":
        return engine_http.check_command(argv)
    if cmd == "make-weights" and len(argv) <= 3:
        if len(argv) == 3:
            os.environ["ENGINE_WEIGHTS"] = argv[2]
        ensure_preload()
        cfg = model_config()
        path = weights_path(cfg)
        if os.path.exists(path):
            raise SystemExit(f"gpu-engine: {path} exists; remove it first")
        phases = {}
        Model(cfg, path, os.environ.get("ENGINE_MEMORY_SAVER", "1") != "0", False, phases)
        print(json.dumps(dict(phases, weights_path=path)))
        return 0
    raise SystemExit(__doc__)


if __name__ == "__main__":
    sys.exit(main(sys.argv))
