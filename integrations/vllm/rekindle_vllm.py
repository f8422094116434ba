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
import glob
import json
import logging
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import rekindle_heap  # noqa: E402
import rekindle_weights as rw  # noqa: E402

LOAD_FORMAT = "rekindle"
SAMPLE = 4096    # bytes compared at each end of a tensor
log = logging.getLogger("vllm.rekindle")  # vLLM's handlers print it

_attached = {}   # set path -> WeightSet, mapped and registered: kept for the process's life


class Mismatch(rw.SetError):
    """The set is not the model's: never load it."""


def model_files(model_dir):
    """The safetensors files vLLM loads from model_dir: the index's when there
    is one, else every *.safetensors."""
    index = os.path.join(model_dir, "model.safetensors.index.json")
    if os.path.isfile(index):
        with open(index) as f:
            names = sorted(set(json.load(f)["weight_map"].values()))
        return [os.path.join(model_dir, n) for n in names]
    return sorted(glob.glob(os.path.join(model_dir, "*.safetensors")))


def model_tensors(model_dir):
    """{name: TensorInfo} of the model folder's files (headers only)."""
    files = model_files(model_dir)
    if not files:
        raise Mismatch(f"{model_dir} holds no safetensors files to compare the weight set with")
    out = {}
    for path in files:
        out.update(rw.read_header(path)[1])
    return out


def compare(ws, model_dir, want=None):
    """Raise Mismatch, naming the set and the first tensor that differs, unless
    ws holds exactly the model folder's tensors (names, dtypes, shapes) and
    the same bytes at both ends of each."""
    want = model_tensors(model_dir) if want is None else want
    what = f"weight set {ws.name} ({ws.path}) does not match the model in {model_dir}"
    fix = f"load the set from this model's files (rekindle-weights load {ws.name} DIR) or serve the model it was made from"
    for name in sorted(want):
        w, s = want[name], ws.tensors.get(name)
        if s is None:
            raise Mismatch(f"{what}: tensor {name} is missing from the set: {fix}")
        if (s.dtype, s.shape) != (w.dtype, w.shape):
            raise Mismatch(f"{what}: tensor {name} is {s.dtype}{list(s.shape)} in the set, "
                           f"{w.dtype}{list(w.shape)} in the model's files: {fix}")
    extra = sorted(set(ws.tensors) - set(want))
    if extra:
        raise Mismatch(f"{what}: tensor {extra[0]} is in the set, not in the model's files "
                       f"({len(extra)} such): {fix}")
    files = {}
    try:
        for name in sorted(want):
            w = want[name]
            if w.file not in files:
                files[w.file] = os.open(w.file, os.O_RDONLY | os.O_CLOEXEC)
            n, got = min(SAMPLE, w.nbytes), ws.buffer(name)
            for off in sorted({0, w.nbytes - n}):
                if bytes(got[off:off + n]) != os.pread(files[w.file], n, w.start + off):
                    raise Mismatch(f"{what}: tensor {name} holds other bytes than {w.file} "
                                   f"(at byte {off} of the tensor): {fix}")
    finally:
        for fd in files.values():
            os.close(fd)


def attach(path, model_dir):
    """The set at path, checked against model_dir, mapped and registered
    once per process and kept; checked again on every call, since a restore
    or a reload of the set may bring other files to the path. Returns
    (ws, None), or (None, why) when there is no set to use; raises Mismatch
    or SetError for a set that is there but wrong."""
    try:
        fresh = rw.open_set(path)
    except rw.Unavailable as e:
        return None, str(e)
    ws = _attached.get(fresh.path)
    if ws is not None and ws.files == fresh.files and ws.current():
        # The files mapped are the files at the path (maybe other files
        # than at the checkpoint, of the same sizes): judge them by what
        # they hold now.
        ws.manifest, ws.tensors, ws.metadata = fresh.manifest, fresh.tensors, fresh.metadata
        compare(ws, model_dir)
        ws.register()
        return ws, None
    if ws is not None:
        log.warning("rekindle: weight set %s changed since it was mapped: mapping it again", ws.name)
        del _attached[ws.path]
        ws.close()
    try:
        fresh.map()
        compare(fresh, model_dir)
        fresh.register()
    except BaseException:
        fresh.close()  # its mappings and open files: an evicted set's memory is freed
        raise
    _attached[fresh.path] = fresh
    return fresh, None


def weights(ws):
    """(name, CPU tensor over the pinned mapping) in file order, then the
    rate. The mapping holds the bytes compare() judged: a set evicted or
    loaded again meanwhile does not change what is copied (the next load
    maps the new files and judges them)."""
    t, total = time.perf_counter(), 0
    for name, info in sorted(ws.tensors.items(), key=lambda kv: (kv[1].file, kv[1].start)):
        total += info.nbytes
        yield name, ws.tensor(name)
    secs = time.perf_counter() - t
    log.info("rekindle: weights from weight set %s: %.2f GB in %.2f s (%.1f GB/s; registered in %.2f s)",
             ws.name, total / 1e9, secs, total / 1e9 / secs if secs else 0.0, ws.register_s)


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
