#!/usr/bin/env python3
"""make-model.py DIR [--layers N]: write a Qwen2 model folder that vLLM
serves, with seeded random weights and a byte-level BPE tokenizer trained
here on the Python standard library's sources: no download, the same bytes
on every run with the same libraries. For tests and benchmarks of a real
architecture at a real size (default: 1.21 B parameters, 2.4 GB of bf16),
where no real weights can be fetched. A user serves real weights instead.

Needs torch, safetensors and tokenizers (transformers brings them). The
folder is written under DIR.tmp and renamed, so a DIR that exists is whole.
"""
import argparse
import glob
import json
import os
import shutil
import sys
import sysconfig

VOCAB = 16384


def config(layers):
    return {
        "architectures": ["Qwen2ForCausalLM"], "model_type": "qwen2",
        "hidden_size": 2048, "intermediate_size": 5632, "num_hidden_layers": layers,
        "num_attention_heads": 16, "num_key_value_heads": 4, "head_dim": 128,
        "vocab_size": VOCAB, "max_position_embeddings": 4096, "rope_theta": 1000000.0,
        "rms_norm_eps": 1e-6, "hidden_act": "silu", "tie_word_embeddings": False,
        "torch_dtype": "bfloat16", "bos_token_id": 0, "eos_token_id": 1,
        "use_sliding_window": False, "sliding_window": None, "max_window_layers": layers,
        "attention_dropout": 0.0, "initializer_range": 0.02,
    }


def tokenizer(out):
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    special = ["<|endoftext|>", "<|im_end|>"]
    trainer = trainers.BpeTrainer(vocab_size=VOCAB, special_tokens=special, show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    files = sorted(glob.glob(os.path.join(sysconfig.get_path("stdlib"), "*.py")))
    tok.train(files, trainer)
    # A small corpus may stop short of VOCAB: fill the rest, so every id the
    # model can emit decodes.
    n = tok.get_vocab_size()
    if n < VOCAB:
        tok.add_special_tokens([f"<|extra_{i}|>" for i in range(VOCAB - n)])
    tok.save(os.path.join(out, "tokenizer.json"))
    with open(os.path.join(out, "tokenizer_config.json"), "w") as f:
        json.dump({"tokenizer_class": "PreTrainedTokenizerFast", "bos_token": special[0],
                   "eos_token": special[0], "pad_token": special[0], "model_max_length": 4096}, f)
    return tok.get_vocab_size()


def weights(cfg, out):
    import torch
    from safetensors.torch import save_file
    dev = "cuda" if torch.cuda.is_available() else "cpu"
    g = torch.Generator(device=dev).manual_seed(20261124)
    h, inter, L = cfg["hidden_size"], cfg["intermediate_size"], cfg["num_hidden_layers"]
    hd, q, kv = cfg["head_dim"], cfg["num_attention_heads"], cfg["num_key_value_heads"]

    def rand(*shape):
        return (torch.randn(*shape, generator=g, device=dev, dtype=torch.float32) * 0.02).to(torch.bfloat16).cpu()
    t = {"model.embed_tokens.weight": rand(VOCAB, h), "model.norm.weight": torch.ones(h, dtype=torch.bfloat16),
         "lm_head.weight": rand(VOCAB, h)}
    for i in range(L):
        p = f"model.layers.{i}."
        t[p + "input_layernorm.weight"] = torch.ones(h, dtype=torch.bfloat16)
        t[p + "post_attention_layernorm.weight"] = torch.ones(h, dtype=torch.bfloat16)
        for name, rows in (("q", q * hd), ("k", kv * hd), ("v", kv * hd)):
            t[p + f"self_attn.{name}_proj.weight"] = rand(rows, h)
            t[p + f"self_attn.{name}_proj.bias"] = rand(rows)
        t[p + "self_attn.o_proj.weight"] = rand(h, q * hd)
        t[p + "mlp.gate_proj.weight"] = rand(inter, h)
        t[p + "mlp.up_proj.weight"] = rand(inter, h)
        t[p + "mlp.down_proj.weight"] = rand(h, inter)
    save_file(t, os.path.join(out, "model.safetensors"), metadata={"format": "pt"})
    return sum(v.numel() for v in t.values())


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("dir")
    ap.add_argument("--layers", type=int, default=24, help="decoder layers (24: 1.21 B parameters)")
    a = ap.parse_args()
    if os.path.exists(os.path.join(a.dir, "config.json")):
        print(f"make-model.py: {a.dir} holds a model already", file=sys.stderr)
        return
    tmp = a.dir.rstrip("/") + ".tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    os.makedirs(tmp)
    cfg = config(a.layers)
    tokenizer(tmp)
    params = weights(cfg, tmp)
    with open(os.path.join(tmp, "config.json"), "w") as f:
        json.dump(cfg, f, indent=1)
    with open(os.path.join(tmp, "generation_config.json"), "w") as f:
        json.dump({"bos_token_id": 0, "eos_token_id": 1}, f)
    if os.path.isdir(a.dir):
        os.rmdir(a.dir)  # an empty folder left for us; a full one stops here
    os.rename(tmp, a.dir)
    print(f"make-model.py: wrote {a.dir}: Qwen2, {a.layers} layers, {params / 1e9:.2f} B parameters", file=sys.stderr)


if __name__ == "__main__":
    main()
