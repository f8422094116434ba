"""rekindle_model_set: a weight set checked against the model folder it
stands for, mapped and registered once per process, and read as (name,
tensor) pairs: what the vLLM plugin (integrations/vllm/rekindle_vllm.py) and
the SGLang plugin (integrations/sglang/rekindle_sglang.py) share. Plain
python3 but for the tensors (torch, through rekindle_weights)."""
import glob
import json
import logging
import os
import time

import rekindle_weights as rw

SAMPLE = 4096    # bytes compared at each end of a tensor

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
        logging.getLogger("rekindle").warning("rekindle: weight set %s changed since it was mapped: mapping it again", ws.name)
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


def weights(ws, log):
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
