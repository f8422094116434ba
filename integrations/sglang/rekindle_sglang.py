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

It also gates the API server: SGLang serves requests while its memory is
released, and a restored server answers /health before the wake has resumed
it, so a request would run on unmapped GPU memory or, when the weights were
dropped on release (no --enable-weights-cpu-backup), on weights not yet
reloaded. From release_memory_occupation until the memory is resumed and, for
dropped weights, until update_weights_from_disk succeeds, /health answers 503
(SGLang's "starting" status) and a generation request fails with a 503 that
says why. A wake whose reload fails (a weight set of another model) leaves the
gate closed: the engine does not serve wrong weights.

And it empties torch's cache in the scheduler as its memory is released.
SGLang pauses its tagged memory but keeps the blocks torch cached outside the
tags (warm-up activations, the memory profile's), and every byte still on the
GPU at the checkpoint is copied by CUDA's checkpoint and again by each
restore. REKINDLE_SGLANG_EMPTY_CACHE=0 keeps them (to measure what it saves).
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


ALL_TAGS = ("weights", "kv_cache", "cuda_graph")  # SGLang's GPU_MEMORY_ALL_TYPES


class Gate:
    """What the API server process knows of the memory's state."""

    def __init__(self):
        self.released = set()
        self.reload = False  # the weights' contents were dropped and are not loaded again yet

    def why(self):
        if self.released:
            return (f"rekindle: SGLang's memory ({', '.join(sorted(self.released))}) is released: "
                    "it serves again once the wake (POST /resume_memory_occupation) resumes it")
        if self.reload:
            return ("rekindle: SGLang's weights were dropped on release and are not loaded again: "
                    "it serves once POST /update_weights_from_disk succeeds")
        return None


gate = Gate()


def _tags(obj):
    return set(getattr(obj, "tags", None) or ALL_TAGS)


def _status(manager):
    """SGLang's /health answers 503 while the status is Starting."""
    from sglang.srt.managers.tokenizer_manager import ServerStatus

    closed = gate.why() is not None
    if closed and manager.server_status == ServerStatus.Up:
        manager.server_status = ServerStatus.Starting
    elif not closed and manager.server_status == ServerStatus.Starting:
        manager.server_status = ServerStatus.Up


def on_release(original, manager, obj, *args, **kwargs):
    async def run():
        tags = _tags(obj)
        gate.released |= tags  # closed before the memory goes
        if "weights" in tags and not getattr(manager.server_args, "enable_weights_cpu_backup", False):
            gate.reload = True
        _status(manager)
        return await original(manager, obj, *args, **kwargs)
    return run()


def on_resume(original, manager, obj, *args, **kwargs):
    async def run():
        out = await original(manager, obj, *args, **kwargs)
        gate.released -= _tags(obj)
        _status(manager)
        return out
    return run()


def on_update_from_disk(original, manager, obj, *args, **kwargs):
    async def run():
        out = await original(manager, obj, *args, **kwargs)
        if out[0] and not gate.released:
            gate.reload = False
            _status(manager)
        return out
    return run()


def on_scheduler_release(original, *args, **kwargs):
    """In the scheduler: torch's free cached blocks handed back, then the
    release. Before it, not after: in its preload mode torch_memory_saver
    owns the blocks torch cached inside a tag, and freeing one it has paused
    is not safe in every release of it."""
    if os.environ.get("REKINDLE_SGLANG_EMPTY_CACHE", "1") == "0":
        return original(*args, **kwargs)
    import gc
    import torch

    before = torch.cuda.memory_reserved()
    gc.collect()
    torch.cuda.empty_cache()
    emptied = torch.cuda.memory_reserved()
    out = original(*args, **kwargs)
    free, total = torch.cuda.mem_get_info()
    log.info("rekindle: torch's cache emptied before the release: %d -> %d MiB reserved; released: %d MiB of the GPU in use",
             before >> 20, emptied >> 20, (total - free) >> 20)
    return out


def on_generate(original, manager, obj, *args, **kwargs):
    why = gate.why()
    if why is None:
        return original(manager, obj, *args, **kwargs)

    async def refused():
        err = ValueError(why)
        err.status_code = 503  # SGLang's HTTP server answers a ValueError with its status_code
        raise err
        yield  # an async generator, as generate_request is
    return refused()


def register():
    from sglang.srt.plugins.hook_registry import HookRegistry, HookType

    HookRegistry.register(TARGET, weights_iterator, HookType.AROUND)
    tm = "sglang.srt.managers.tokenizer_manager.TokenizerManager."
    mixin = "sglang.srt.managers.tokenizer_control_mixin.TokenizerControlMixin."
    HookRegistry.register(mixin + "release_memory_occupation", on_release, HookType.AROUND)
    HookRegistry.register(mixin + "resume_memory_occupation", on_resume, HookType.AROUND)
    HookRegistry.register(tm + "update_weights_from_disk", on_update_from_disk, HookType.AROUND)
    HookRegistry.register(tm + "generate_request", on_generate, HookType.AROUND)
    updater = "sglang.srt.managers.scheduler_components.weight_updater.SchedulerWeightUpdaterManager."
    HookRegistry.register(updater + "release_memory_occupation", on_scheduler_release, HookType.AROUND)
