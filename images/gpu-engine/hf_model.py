"""The transformers backend of the GPU engine (ENGINE_BACKEND=transformers).

server.py's Model with its model code replaced by transformers' own:
Qwen2ForCausalLM built from the same configuration (the weights file's
tensor names are Hugging Face's, so the same file loads into it), a
StaticCache per decode batch size, and one decode step per batch size
compiled with torch.compile (inductor + triton, autotuning on by default)
and captured as a CUDA graph. That is what makes a cold start take minutes,
as SGLang's and vLLM's do: imports, weights, compile, autotune, graph
capture. Weight loading, the memory API and the weight set are server.py's.

Memory regions as SGLang lays them out: parameters in "weights", the static
caches in "kv_cache", the graphs in "cuda_graph"; rotary tables, the step's
inputs and compiled kernels outside every region.

  ENGINE_COMPILE      torch.compile mode (max-autotune-no-cudagraphs); "none": eager
  ENGINE_BATCH_SIZES  decode batch sizes, each captured as a CUDA graph (1,2,4); batch 1
                      compiles for static shapes, the others share one symbolic-batch graph
"""

import inspect
import os
import time

DEFAULT_COMPILE = "max-autotune-no-cudagraphs"
DEFAULT_BATCH_SIZES = "1,2,4"


def batch_sizes(environ=None):
    env = os.environ if environ is None else environ
    raw = env.get("ENGINE_BATCH_SIZES", "").strip() or DEFAULT_BATCH_SIZES
    try:
        sizes = sorted({int(s) for s in raw.split(",") if s.strip()})
    except ValueError:
        sizes = []
    if not sizes or sizes[0] < 1 or sizes[-1] > 256:
        raise SystemExit(f"gpu-engine: ENGINE_BATCH_SIZES={raw!r}: want batch sizes in 1..256, e.g. 1,2,4")
    return sizes


def compile_mode(environ=None):
    env = os.environ if environ is None else environ
    mode = env.get("ENGINE_COMPILE", "").strip() or DEFAULT_COMPILE
    if mode in ("none", "0", "eager"):
        return None
    known = ("default", "reduce-overhead", "max-autotune", "max-autotune-no-cudagraphs")
    if mode not in known:
        raise SystemExit(f"gpu-engine: ENGINE_COMPILE={mode!r}: want one of {', '.join(known)} or none")
    if mode in ("reduce-overhead", "max-autotune"):
        # Their CUDA graph trees would allocate outside torch_memory_saver's
        # "cuda_graph" region; the engine captures its own graphs.
        raise SystemExit(f"gpu-engine: ENGINE_COMPILE={mode}: use a mode without CUDA graphs "
                         "(max-autotune-no-cudagraphs or default): the engine captures its own")
    return mode


def compile_stats(torch):
    """What torch.compile has done in this process: graphs compiled (a
    recompile adds one), graph breaks, and seconds spent autotuning."""
    from torch._dynamo import utils
    c = utils.counters
    times = dict(getattr(utils, "compilation_time_metrics", {}))
    autotune = sum(sum(v) for k, v in times.items() if k.endswith(("_template_autotuning", "_template_precompiling")))
    return {"frames_compiled": int(c["stats"].get("unique_graphs", 0)),
            "graph_breaks": int(sum(c["graph_break"].values())),
            "autotune_s": round(autotune, 3)}


class Transformers:
    """Mixin over server.Model: the model code, KV cache and decode step
    come from transformers; everything else from Model."""

    backend = "transformers"

    def _import_backend(self):
        import transformers
        self.transformers = transformers
        self.batch_sizes = batch_sizes()
        self.compile_mode = compile_mode()

    def _hf_config(self):
        c = self.cfg
        if c["hidden"] != c["heads"] * c["head_dim"]:
            raise SystemExit(f"gpu-engine: shape {c['shape']}: Qwen2Config needs hidden = heads x head_dim")
        kw = dict(vocab_size=c["vocab"], hidden_size=c["hidden"], intermediate_size=c["inter"],
                  num_hidden_layers=c["layers"], num_attention_heads=c["heads"],
                  num_key_value_heads=c["kv_heads"], max_position_embeddings=c["context_len"],
                  rms_norm_eps=c["eps"], tie_word_embeddings=c["tie"], use_sliding_window=False,
                  rope_theta=c["theta"], rope_parameters={"rope_type": "default", "rope_theta": c["theta"]})
        conf = self.transformers.Qwen2Config(**kw)
        conf._attn_implementation = "sdpa"
        return conf

    def _alloc_weights(self):
        """Build Qwen2ForCausalLM on the meta device, then give each parameter
        memory inside the "weights" region; the rotary tables are made again
        outside it (a released region comes back with undefined contents)."""
        torch, nn = self.torch, self.torch.nn
        self.hf_config = self._hf_config()
        with torch.device("meta"):
            model = self.transformers.Qwen2ForCausalLM(self.hf_config)
        made = {}
        with self._region("weights"):
            for mod in model.modules():
                for name, p in list(mod._parameters.items()):
                    if p is None:
                        continue
                    if id(p) not in made:
                        made[id(p)] = nn.Parameter(torch.empty(p.shape, dtype=torch.bfloat16, device=self.dev),
                                                   requires_grad=False)
                    mod._parameters[name] = made[id(p)]
        if self.cfg["tie"]:
            model.lm_head.weight = model.model.embed_tokens.weight
        rot = model.model.rotary_emb
        with torch.device(self.dev):  # outside the region: never released
            model.model.rotary_emb = type(rot)(config=self.hf_config)
        left = [n for n, b in model.named_buffers() if b.is_meta]
        if left:
            raise RuntimeError(f"transformers {self.transformers.__version__}: buffers left on the meta device: {left}")
        model.eval()
        self.hf = model
        self.w = dict(model.named_parameters())
        if self.cfg["tie"]:
            self.w["lm_head.weight"] = self.w["model.embed_tokens.weight"]
        want = set(self.param_names()) | ({"lm_head.weight"} if self.cfg["tie"] else set())
        if set(self.w) != want:
            raise RuntimeError(f"transformers {self.transformers.__version__}: Qwen2 parameters "
                               f"{sorted(set(self.w) ^ want)[:4]} differ from the weights file's names")
        self.w = {n: t.data for n, t in self.w.items()}

    def _alloc_kv(self):
        """One StaticCache per batch size, allocated now, in "kv_cache"; the
        decode step's inputs outside every region."""
        torch, tf, c = self.torch, self.transformers, self.cfg
        T = c["context_len"]
        self.caches = {}
        eager = "max_batch_size" in inspect.signature(tf.StaticCache).parameters  # transformers 4.x
        with self._region("kv_cache"):
            for bs in self.batch_sizes:
                if eager:  # allocated by the constructor
                    cache = tf.StaticCache(config=self.hf_config, max_batch_size=bs, max_cache_len=T,
                                           device=self.dev, dtype=torch.bfloat16)
                else:
                    cache = tf.StaticCache(config=self.hf_config, max_cache_len=T)
                    cache.early_initialization(batch_size=bs, num_heads=c["kv_heads"], head_dim=c["head_dim"],
                                               dtype=torch.bfloat16, device=self.dev)
                self.caches[bs] = cache
        self.kv_bytes = sum(bs * c["layers"] * 2 * c["kv_heads"] * c["head_dim"] * T * 2 for bs in self.batch_sizes)
        self.positions = torch.arange(T, device=self.dev)
        self.idx = torch.zeros(1, dtype=torch.long, device=self.dev)  # the cache slot being written
        self.inputs = {bs: (torch.zeros(bs, 1, dtype=torch.long, device=self.dev),   # tokens
                            torch.zeros(bs, dtype=torch.long, device=self.dev))     # left padding
                       for bs in self.batch_sizes}
        fwd = inspect.signature(self.hf.forward).parameters
        self.pass_cache_position = "cache_position" in fwd

    def _decode(self, tok, pad, cache):
        """One decode step for a batch: token tok[r] at cache slot idx, row r
        left-padded by pad[r]. Writes K/V, advances idx, returns the argmax."""
        torch = self.torch
        idx = self.idx
        seen = (self.positions <= idx) & (self.positions >= pad.unsqueeze(1))  # [bs, T]
        kw = {}
        if self.pass_cache_position:
            kw["cache_position"] = idx
        out = self.hf(input_ids=tok, position_ids=(idx - pad).clamp(min=0).unsqueeze(1),
                      attention_mask=seen[:, None, None, :], past_key_values=cache, use_cache=True, **kw)
        idx.add_(1)
        return out.logits[:, -1, :].argmax(dim=-1)

    def _reset(self, bs):
        self.idx.zero_()
        for layer in getattr(self.caches[bs], "layers", []):
            n = getattr(layer, "cumulative_length", None)
            if n is not None and hasattr(n, "zero_"):
                n.zero_()

    def _prepare_step(self, use_graph):
        """Compile the step per batch size (autotuning on the first call),
        warm it up on a side stream, capture it, then generate one token as
        a user would (the cold start's first token)."""
        torch, phases = self.torch, self.phases
        import torch._dynamo as dynamo
        for knob in ("cache_size_limit", "recompile_limit"):
            if hasattr(dynamo.config, knob):
                setattr(dynamo.config, knob, max(getattr(dynamo.config, knob), 4 * len(self.batch_sizes)))
        step = self._decode
        if self.compile_mode:
            # dynamic=None: batch 1 compiles for its static shapes; the next
            # batch size recompiles once with a symbolic batch, which every
            # larger size reuses (as vLLM compiles one graph for its sizes).
            step = torch.compile(self._decode, mode=self.compile_mode, dynamic=None)
        self.step_fn = step
        compile_s, warm_s = 0.0, 0.0
        stream = torch.cuda.Stream() if self.cuda else None
        for bs in self.batch_sizes:
            tok, pad = self.inputs[bs]
            for i in range(3):
                self._reset(bs)
                t = time.time()
                if stream is not None:
                    stream.wait_stream(torch.cuda.current_stream())
                    with torch.cuda.stream(stream):
                        step(tok, pad, self.caches[bs])
                    torch.cuda.current_stream().wait_stream(stream)
                else:
                    step(tok, pad, self.caches[bs])
                self._sync()
                if i == 0:
                    compile_s += time.time() - t
                else:
                    warm_s += time.time() - t
        stats = compile_stats(torch)
        phases["compile_s"] = round(compile_s - stats["autotune_s"], 3)
        phases["autotune_s"] = stats["autotune_s"]
        phases["warmup_s"] = round(warm_s, 3)
        self.graphs, self.outs = {}, {}
        self.graph = None
        if use_graph:
            t = time.time()
            pool = None
            for bs in self.batch_sizes:
                tok, pad = self.inputs[bs]
                self._reset(bs)
                g = torch.cuda.CUDAGraph()
                if self.saver is not None:
                    ctx = self.saver.cuda_graph(cuda_graph=g, pool=pool, tag="cuda_graph")
                else:
                    ctx = torch.cuda.graph(g, pool=pool)
                with ctx:
                    self.outs[bs] = step(tok, pad, self.caches[bs])
                pool = g.pool()
                self.graphs[bs] = g
            self._sync()
            self.graph = self.graphs  # server.Model's release/resume look for a graph
            phases["graph_capture_s"] = round(time.time() - t, 3)
        self.compile_at_ready = compile_stats(torch)
        t = time.time()
        self.generate_batch([[1, 2, 3]], 1)
        phases["first_token_s"] = round(time.time() - t, 3)

    def _run(self, bs):
        tok, pad = self.inputs[bs]
        if bs in self.graphs:
            self.graphs[bs].replay()
            return self.outs[bs]
        return self.step_fn(tok, pad, self.caches[bs])

    def generate_batch(self, prompts, n):
        """Greedy decoding of up to max(batch sizes) prompts together, left
        padded to the longest; the prompt runs through the decode step token
        by token. Returns ([ids per prompt], seconds)."""
        torch, c = self.torch, self.cfg
        if not prompts or len(prompts) > self.batch_sizes[-1]:
            raise ValueError(f"{len(prompts)} prompts: this engine decodes 1..{self.batch_sizes[-1]} at once "
                             f"(ENGINE_BATCH_SIZES={','.join(map(str, self.batch_sizes))})")
        longest = max(len(p) for p in prompts)
        if longest + n > c["context_len"]:
            raise ValueError(f"prompt ({longest} tokens) + max_new_tokens ({n}) exceeds the context of {c['context_len']}")
        bs = next(b for b in self.batch_sizes if b >= len(prompts))
        rows = list(prompts) + [prompts[0]] * (bs - len(prompts))  # filler rows, results dropped
        t0 = time.time()
        tok, pad = self.inputs[bs]
        grid = torch.tensor([[0] * (longest - len(p)) + list(p) for p in rows], dtype=torch.long, device=self.dev)
        pad.copy_(torch.tensor([longest - len(p) for p in rows], dtype=torch.long))
        self._reset(bs)
        out = torch.empty(bs, n, dtype=torch.long, device=self.dev)
        for j in range(longest):
            tok.copy_(grid[:, j:j + 1])
            nxt = self._run(bs)
        out[:, 0].copy_(nxt)
        for i in range(1, n):
            tok.copy_(out[:, i - 1:i])
            out[:, i].copy_(self._run(bs))
        ids = out.tolist()[:len(prompts)]
        return ids, time.time() - t0

    def generate(self, ids, n):
        out, dt = self.generate_batch([ids], n)
        return out[0], 0, dt

    def backend_state(self):
        return {"backend": self.backend, "transformers": self.transformers.__version__,
                "torch": self.torch.__version__, "compile_mode": self.compile_mode,
                "batch_sizes": self.batch_sizes, "graphs": sorted(self.graphs),
                "kv_bytes": self.kv_bytes,
                "compile_at_ready": self.compile_at_ready, "compile_now": compile_stats(self.torch)}
