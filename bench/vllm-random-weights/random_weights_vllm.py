"""random_weights_vllm: the vLLM load format "random-gpu", for benchmarks of
model shapes whose weights the host cannot hold (disk or memory).

Each tensor of a tests/gpu/make-model.py shape (Hugging Face names and
shapes, Llama or Qwen3 layout) is made on the GPU from a seed of its own and
handed to the model's load_weights, at the cold start and at every
reload_weights (a wake from sleep level 2): the same weights each time, so
greedy tokens compare across restores. vLLM's own "dummy" format cannot be
reloaded, so a server started with it cannot wake from level 2.

It measures everything but moving the weights from host memory: compare
with a weight set's rate (rekindle-weights, docs/weights.md) for that.

Use: copy this folder's two entries into the vLLM site folder (ENGINE_SITE),
make the model folder with make-model.py --no-weights, and start vLLM with
--load-format random-gpu.
"""
import json
import os
import time


def tensors(cfg):
    """(name, shape) of each tensor of a Llama or Qwen3 config (no biases)."""
    h, inter, L = cfg["hidden_size"], cfg["intermediate_size"], cfg["num_hidden_layers"]
    hd, q, kv, V = cfg["head_dim"], cfg["num_attention_heads"], cfg["num_key_value_heads"], cfg["vocab_size"]
    yield "model.embed_tokens.weight", (V, h)
    for i in range(L):
        p = f"model.layers.{i}."
        yield p + "input_layernorm.weight", (h,)
        yield p + "post_attention_layernorm.weight", (h,)
        for name, rows in (("q", q * hd), ("k", kv * hd), ("v", kv * hd)):
            yield p + f"self_attn.{name}_proj.weight", (rows, h)
        if cfg["model_type"] == "qwen3":
            yield p + "self_attn.q_norm.weight", (hd,)
            yield p + "self_attn.k_norm.weight", (hd,)
        yield p + "self_attn.o_proj.weight", (h, q * hd)
        yield p + "mlp.gate_proj.weight", (inter, h)
        yield p + "mlp.up_proj.weight", (inter, h)
        yield p + "mlp.down_proj.weight", (h, inter)
    yield "model.norm.weight", (h,)
    yield "lm_head.weight", (V, h)


def register():
    import torch
    from vllm.logger import init_logger
    from vllm.model_executor.model_loader import register_model_loader
    from vllm.model_executor.model_loader.base_loader import BaseModelLoader
    log = init_logger("vllm.random_weights")

    class RandomGPULoader(BaseModelLoader):
        def download_model(self, model_config):
            pass

        # get_all_weights is what reload_weights asks a loader for.
        def get_all_weights(self, model_config, model):
            with open(os.path.join(model_config.model, "config.json")) as f:
                cfg = json.load(f)
            if cfg["model_type"] not in ("llama", "qwen3"):
                raise ValueError(f"random-gpu: model type {cfg['model_type']!r}: only llama and qwen3 layouts")
            dev = torch.device("cuda", torch.cuda.current_device())
            t0, n = time.perf_counter(), 0
            for i, (name, shape) in enumerate(tensors(cfg)):
                if name.endswith("norm.weight"):
                    t = torch.ones(shape, dtype=torch.bfloat16, device=dev)
                else:
                    g = torch.Generator(device=dev).manual_seed(20261129 + i)
                    t = torch.randn(shape, generator=g, device=dev, dtype=torch.bfloat16).mul_(0.02)
                n += t.numel() * 2
                yield name, t
            torch.cuda.synchronize()
            del t
            # The temporaries, cached by torch, would leave no room for the
            # KV cache that wakes next on a nearly full GPU.
            torch.cuda.empty_cache()
            log.info("random-gpu: %.1f GB of weights made on the GPU and loaded in %.2f s",
                     n / 1e9, time.perf_counter() - t0)

        def load_weights(self, model, model_config):
            model.load_weights(self.get_all_weights(model_config, model))

    register_model_loader("random-gpu")(RandomGPULoader)
