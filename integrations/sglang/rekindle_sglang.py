"""rekindle_sglang: an SGLang plugin that reads a model's weights from a
Rekindle weight set (integrations/weights/, docs/weights.md) instead of the
model folder, at the cold start and at every update_weights_from_disk (the
wake after a restore).

SGLang runs it in every process through the entry point
sglang.srt.plugins = rekindle = rekindle_sglang:register (the dist-info
beside this file; serve.py puts this folder on the path). It wraps
DefaultModelLoader._get_weights_iterator, through which both the first load
and update_weights_from_disk read the model: with ENGINE_WEIGHT_SET naming a
set (/rekindle/weights/NAME, the CDI device rekindle.dev/weights=NAME), the
model's weights come from the set's pinned mapping, checked against the
model folder first (rekindle_model_set.py): a set of another model fails
the load, naming the set and the tensor, before any weight is written. No
set at the path: the model folder, and the log says why.
"""
import logging
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import rekindle_model_set as rms  # noqa: E402

TARGET = "sglang.srt.model_loader.loader.DefaultModelLoader._get_weights_iterator"
log = logging.getLogger("sglang.rekindle")


def weights_iterator(original, loader, source, *args, **kwargs):
    """The AROUND hook: the set's tensors for the served model's own weights
    (a source without a prefix: not a draft model's or a secondary file's),
    the model folder's otherwise."""
    path = os.environ.get("ENGINE_WEIGHT_SET", "")
    if not path or getattr(source, "prefix", ""):
        return original(loader, source, *args, **kwargs)
    ws, why = rms.attach(path, source.model_or_path)
    if ws is None:
        log.warning("rekindle: weights from the model folder %s, not a weight set: %s", source.model_or_path, why)
        return original(loader, source, *args, **kwargs)
    return rms.weights(ws, log)


def register():
    from sglang.srt.plugins.hook_registry import HookRegistry, HookType

    HookRegistry.register(TARGET, weights_iterator, HookType.AROUND)
