#!/usr/bin/env python3
"""make-model.py DIR [--shape NAME] [--layers N ...] [--no-weights]: write a model folder
that vLLM serves, with seeded random weights and a byte-level BPE tokenizer
trained here on the Python standard library's sources: no download, the
same bytes on every run with the same libraries. For tests and benchmarks of
a real architecture at a real size, where no real weights can be fetched. A
user serves real weights instead.

Shapes (--shape; each number can be changed with its flag):
  qwen2-1b   Qwen2, hidden 2048, 24 layers, 16/4 heads, vocab 16384: 1.15 B parameters, 2.3 GB (default)
  qwen3-8b   Qwen3-8B's: hidden 4096, 36 layers, 32/8 heads, vocab 151936: 8.19 B, 16.4 GB
  qwen3-14b  Qwen3-14B's: hidden 5120, 40 layers, 40/8 heads: 14.8 B, 29.5 GB
  qwen3-32b  Qwen3-32B's: hidden 5120, 64 layers, 64/8 heads: 32.8 B, 65.5 GB
  llama-70b  Llama-3.1-70B's: hidden 8192, 80 layers, 64/8 heads, vocab 128256: 70.6 B, 141 GB

--no-weights writes the config, the tokenizer and the tensors' names and
shapes (random-weights.json) only, for a loader that makes the weights on
the GPU: a shape too large for the host's disk or memory still serves.
vLLM's --load-format dummy cannot reload, so a server checkpointed asleep
at level 2 cannot wake; bench/vllm-random-weights can.

Needs torch, safetensors and tokenizers (transformers brings them); a GPU
makes the weights faster. Files of more than SHARD bytes are split as
Hugging Face does (model-0000K-of-0000N.safetensors and an index). The
folder is written under DIR.tmp and renamed, so a DIR that exists is whole.
"""
import argparse
import glob
import json
import math
import os
import shutil
import sys
import sysconfig

SHARD = 4 << 30
SHAPES = {
    "qwen2-1b": dict(arch="qwen2", hidden=2048, intermediate=5632, layers=24, heads=16, kv_heads=4, vocab=16384),
    "qwen3-8b": dict(arch="qwen3", hidden=4096, intermediate=12288, layers=36, heads=32, kv_heads=8, vocab=151936),
    "qwen3-14b": dict(arch="qwen3", hidden=5120, intermediate=17408, layers=40, heads=40, kv_heads=8, vocab=151936),
    "qwen3-32b": dict(arch="qwen3", hidden=5120, intermediate=25600, layers=64, heads=64, kv_heads=8, vocab=151936),
    "llama-70b": dict(arch="llama", hidden=8192, intermediate=28672, layers=80, heads=64, kv_heads=8, vocab=128256),
}
ARCHS = {"qwen2": "Qwen2ForCausalLM", "qwen3": "Qwen3ForCausalLM", "llama": "LlamaForCausalLM"}


def config(s):
    """The config.json of shape s (a SHAPES entry, maybe changed)."""
    qwen3 = s["arch"] == "qwen3"
    c = {
        "architectures": [ARCHS[s["arch"]]], "model_type": s["arch"],
        "hidden_size": s["hidden"], "intermediate_size": s["intermediate"], "num_hidden_layers": s["layers"],
        # vLLM's Qwen2 and Llama take hidden / heads whatever head_dim says; Qwen3 reads head_dim.
        "num_attention_heads": s["heads"], "num_key_value_heads": s["kv_heads"],
        "head_dim": 128 if qwen3 else s["hidden"] // s["heads"],
        "vocab_size": s["vocab"], "max_position_embeddings": 4096, "rope_theta": 1000000.0,
        "rms_norm_eps": 1e-6, "hidden_act": "silu", "tie_word_embeddings": False,
        "torch_dtype": "bfloat16", "bos_token_id": 0, "eos_token_id": 1,
        "use_sliding_window": False, "sliding_window": None, "max_window_layers": s["layers"],
        "attention_dropout": 0.0, "initializer_range": 0.02,
    }
    if qwen3 or s["arch"] == "llama":
        c["attention_bias"] = False
    if s["arch"] == "llama":
        c.update(rope_theta=500000.0, rms_norm_eps=1e-5, mlp_bias=False)
        for k in ("use_sliding_window", "sliding_window", "max_window_layers"):
            del c[k]
    return c


def tokenizer(out, vocab):
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    special = ["<|endoftext|>", "<|im_end|>"]
    trainer = trainers.BpeTrainer(vocab_size=vocab, special_tokens=special, show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    files = sorted(glob.glob(os.path.join(sysconfig.get_path("stdlib"), "*.py")))
    tok.train(files, trainer)
    # The corpus stops short of a large vocabulary (about 39k merges): fill
    # the rest, so every id the model can emit decodes.
    n = tok.get_vocab_size()
    if n < vocab:
        tok.add_special_tokens([f"<|extra_{i}|>" for i in range(vocab - n)])
    tok.save(os.path.join(out, "tokenizer.json"))
    with open(os.path.join(out, "tokenizer_config.json"), "w") as f:
        json.dump({"tokenizer_class": "PreTrainedTokenizerFast", "bos_token": special[0],
                   "eos_token": special[0], "pad_token": special[0], "model_max_length": 4096}, f)
    return tok.get_vocab_size()


def tensors(cfg):
    """(name, shape) of every tensor, in the order they are written."""
    h, inter, L = cfg["hidden_size"], cfg["intermediate_size"], cfg["num_hidden_layers"]
    hd, q, kv, V = cfg["head_dim"], cfg["num_attention_heads"], cfg["num_key_value_heads"], cfg["vocab_size"]
    qwen3 = cfg["model_type"] == "qwen3"
    bias = cfg["model_type"] == "qwen2"
    yield "model.embed_tokens.weight", (V, h)
    for i in range(L):
        p = f"model.layers.{i}."
        yield p + "input_layernorm.weight", (h,)
        yield p + "post_attention_layernorm.weight", (h,)
        for name, rows in (("q", q * hd), ("k", kv * hd), ("v", kv * hd)):
            yield p + f"self_attn.{name}_proj.weight", (rows, h)
            if bias:
                yield p + f"self_attn.{name}_proj.bias", (rows,)
        if qwen3:
            yield p + "self_attn.q_norm.weight", (hd,)
            yield p + "self_attn.k_norm.weight", (hd,)
        yield p + "self_attn.o_proj.weight", (h, q * hd)
        yield p + "mlp.gate_proj.weight", (inter, h)
        yield p + "mlp.up_proj.weight", (inter, h)
        yield p + "mlp.down_proj.weight", (h, inter)
    yield "model.norm.weight", (h,)
    yield "lm_head.weight", (V, h)


def weights(cfg, out):
    """Write the tensors in shards of at most SHARD bytes; returns the
    parameter count."""
    import torch
    from safetensors.torch import save_file
    dev = "cuda" if torch.cuda.is_available() else "cpu"
    g = torch.Generator(device=dev).manual_seed(20261124)

    def make(name, shape):
        if name.endswith("norm.weight"):
            return torch.ones(shape, dtype=torch.bfloat16)
        return (torch.randn(*shape, generator=g, device=dev, dtype=torch.float32) * 0.02).to(torch.bfloat16).cpu()
    # Each shard is written when full, so memory holds one; named -0000K-of-N
    # once N is known.
    written, cur, size, params = [], {}, 0, 0

    def flush():
        fn = f"shard-{len(written) + 1:05d}.safetensors"
        save_file(cur, os.path.join(out, fn), metadata={"format": "pt"})
        written.append((fn, list(cur)))
    for name, shape in tensors(cfg):
        t = make(name, shape)
        if cur and size + t.numel() * 2 > SHARD:
            flush()
            cur, size = {}, 0
        cur[name] = t
        size += t.numel() * 2
        params += t.numel()
    flush()
    if len(written) == 1:
        os.rename(os.path.join(out, written[0][0]), os.path.join(out, "model.safetensors"))
        return params
    index = {"metadata": {"total_size": params * 2}, "weight_map": {}}
    for k, (fn, names) in enumerate(written, 1):
        final = f"model-{k:05d}-of-{len(written):05d}.safetensors"
        os.rename(os.path.join(out, fn), os.path.join(out, final))
        index["weight_map"].update({name: final for name in names})
        print(f"make-model.py: wrote {final}", file=sys.stderr, flush=True)
    with open(os.path.join(out, "model.safetensors.index.json"), "w") as f:
        json.dump(index, f, indent=1)
    return params


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter,
                                 epilog=__doc__.split("\n\n")[1])
    ap.add_argument("dir")
    ap.add_argument("--shape", choices=sorted(SHAPES), default="qwen2-1b")
    for k in ("hidden", "intermediate", "layers", "heads", "kv_heads", "vocab"):
        ap.add_argument("--" + k.replace("_", "-"), type=int, help=f"change the shape's {k.replace('_', ' ')}")
    ap.add_argument("--no-weights", action="store_true", help="the config, the tokenizer and random-weights.json only (bench/vllm-random-weights)")
    a = ap.parse_args()
    shape = dict(SHAPES[a.shape])
    shape.update({k: v for k, v in vars(a).items() if k in shape and v is not None})
    if shape["vocab"] < 2 + 256:
        ap.error("--vocab must hold at least the 256 bytes and 2 special tokens")
    if shape["heads"] % shape["kv_heads"]:
        ap.error("--heads must be a multiple of --kv-heads")
    if shape["hidden"] % shape["heads"]:
        ap.error("--hidden must be a multiple of --heads")
    if os.path.exists(os.path.join(a.dir, "config.json")):
        print(f"make-model.py: {a.dir} holds a model already", file=sys.stderr)
        return
    tmp = a.dir.rstrip("/") + ".tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    os.makedirs(tmp)
    cfg = config(shape)
    tokenizer(tmp, shape["vocab"])
    if a.no_weights:
        # What a loader that makes the weights reads (bench/vllm-random-weights).
        names = [[name, list(dims)] for name, dims in tensors(cfg)]
        with open(os.path.join(tmp, "random-weights.json"), "w") as f:
            json.dump({"tensors": names}, f)
        params = sum(math.prod(dims) for _, dims in names)
    else:
        params = weights(cfg, tmp)
    with open(os.path.join(tmp, "config.json"), "w") as f:
        json.dump(cfg, f, indent=1)
    with open(os.path.join(tmp, "generation_config.json"), "w") as f:
        json.dump({"bos_token_id": 0, "eos_token_id": 1}, f)
    if os.path.isdir(a.dir):
        os.rmdir(a.dir)  # an empty folder left for us; a full one stops here
    os.rename(tmp, a.dir)
    print(f"make-model.py: wrote {a.dir}: {cfg['architectures'][0]}, {shape['layers']} layers, hidden {shape['hidden']}, "
          f"{params / 1e9:.2f} B parameters ({params * 2 / 1e9:.1f} GB"
          + (", not written: serve it with --load-format random-gpu, bench/vllm-random-weights)" if a.no_weights else ")"), file=sys.stderr)


if __name__ == "__main__":
    main()
