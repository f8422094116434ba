"""random_weights_vllm: the vLLM load format "random-gpu", for benchmarks of
model shapes whose weights the host cannot hold (disk or memory).

Each tensor that tests/gpu/make-model.py --no-weights lists in the model
folder (random-weights.json: Hugging Face names and shapes) is made in bf16
on the GPU from a seed of its own and handed to the model's load_weights, at
the cold start and at every reload_weights (a wake from sleep level 2): the
same weights each time, so greedy tokens compare across restores. vLLM's own
"dummy" format cannot be reloaded, so a server started with it cannot wake
from level 2.

It measures everything but moving the weights from host memory: compare
with a weight set's rate (rekindle-weights, docs/weights.md) for that.

Use: copy this folder's two entries into the vLLM site folder (ENGINE_SITE),
make the model folder with make-model.py --no-weights, and start vLLM with
--load-format random-gpu.
"""
import json
import os
import time


def tensors(model_dir):
    """(name, shape) of each tensor, from the random-weights.json that
    make-model.py --no-weights writes."""
    path = os.path.join(model_dir, "random-weights.json")
    try:
        with open(path) as f:
            return [(name, tuple(shape)) for name, shape in json.load(f)["tensors"]]
    except FileNotFoundError:
        raise ValueError(f"random-gpu: no {path}: make the model folder with "
                         "tests/gpu/make-model.py --no-weights") from None


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
            names = tensors(model_config.model)
            dev = torch.device("cuda", torch.cuda.current_device())
            t0, n = time.perf_counter(), 0
            for i, (name, shape) in enumerate(names):
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
