"""rekindle_vllm: a vLLM plugin that loads a model's weights from a Rekindle
weight set (integrations/weights/, docs/weights.md) instead of the model folder.

vLLM loads it in every process through the entry point
vllm.general_plugins = rekindle = rekindle_vllm:register (the dist-info
beside this file). It registers the load format "rekindle": serve.py passes
--load-format rekindle when ENGINE_WEIGHT_SET names a set
(/rekindle/weights/NAME, the CDI device rekindle.dev/weights=NAME).

The same loader serves the cold start and every reload_weights at a wake
from sleep level 2. Each worker maps and registers the set once (module
global) and keeps both through checkpoint and restore; each tensor then goes
to the GPU from pinned memory, only the worker's shard of it.

Before anything is copied, the set is compared with the model folder's
safetensors headers (names, dtypes, shapes) and with a sample of each
tensor's bytes: a set of another model fails the load, naming the set and
the tensor, and a wake that fails leaves vLLM asleep. No set at the path
(absent or not loaded): the weights come from the model folder (read by
vLLM's default loader), and the log says why.

The same entry point has each process trim its freed heap once vLLM is
asleep (rekindle_heap.py), so that the checkpoint does not carry it.
"""
import logging
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import rekindle_heap  # noqa: E402
import rekindle_model_set as rms  # noqa: E402

LOAD_FORMAT = "rekindle"
log = logging.getLogger("vllm.rekindle")  # vLLM's handlers print it



# The set against the model folder, shared with the SGLang plugin; the names
# stay here for vLLM's loader and its tests.
from rekindle_model_set import Mismatch, _attached, attach, compare, model_files, model_tensors  # noqa: E402,F401


def weights(ws):
    return rms.weights(ws, log)


def register():
    """vLLM's entry point: add the load format, and trim the heap after sleep
    (every process, maybe twice)."""
    import copy

    rekindle_heap.install()

    from vllm.model_executor.model_loader import register_model_loader
    from vllm.model_executor.model_loader.default_loader import DefaultModelLoader

    class RekindleLoader(DefaultModelLoader):
        def __init__(self, load_config):
            super().__init__(load_config)
            # The model folder, read as vLLM reads it by default: its own
            # loader refuses the format name "rekindle".
            files = copy.copy(load_config)
            files.load_format = "auto"
            self.files = DefaultModelLoader(files)

        def download_model(self, model_config):
            self.files.download_model(model_config)

        # Not a generator: the set is checked when vLLM asks for the
        # weights, before a reload starts taking the model apart.
        def get_all_weights(self, model_config, model):
            path = os.environ.get("ENGINE_WEIGHT_SET", "")
            ws, why = attach(path, model_config.model) if path else (None, "ENGINE_WEIGHT_SET is not set")
            if self.counter_before_loading_weights == 0.0:
                self.counter_before_loading_weights = time.perf_counter()  # vLLM's "Loading weights took"
            if ws is None:
                log.warning("rekindle: weights from the model folder %s, not a weight set: %s",
                            model_config.model, why)
                return self.files.get_all_weights(model_config, model)
            return weights(ws)

    register_model_loader(LOAD_FORMAT)(RekindleLoader)
