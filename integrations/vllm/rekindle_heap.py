"""rekindle_heap: once vLLM is asleep, each of its processes gives the heap
memory it freed back to the kernel, so that the checkpoint does not carry it.

CRIU dumps every resident page. glibc's malloc keeps what a process freed
(Python objects and torch's CPU tensors made while loading and compiling)
resident in its arenas; malloc_trim(0) returns the whole free pages of every
arena to the kernel. The rekindle_vllm plugin calls install() in each vLLM
process: it wraps the sleep of the API server (AsyncLLM), the engine core
(EngineCore) and the GPU worker (Worker), whichever the process imports, to
trim after it, and logs what the process held and gave back.

REKINDLE_TRIM_HEAP=0 leaves the heap as it is.
"""
import ctypes
import gc
import importlib.abc
import inspect
import logging
import os
import sys

log = logging.getLogger("vllm.rekindle")

# module: (class, the process it runs in)
SLEEPS = {
    "vllm.v1.engine.async_llm": ("AsyncLLM", "API server"),
    "vllm.v1.engine.core": ("EngineCore", "engine core"),
    "vllm.v1.worker.gpu_worker": ("Worker", "GPU worker"),
}
MIB = 1 << 20

_trims = 0  # trims done in this process: an outer sleep skips its own after an inner one


class _MallInfo2(ctypes.Structure):
    _fields_ = [(n, ctypes.c_size_t) for n in (
        "arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks",
        "uordblks", "fordblks", "keepcost")]


def anon_bytes():
    """The process's resident anonymous memory (RssAnon), what CRIU dumps."""
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("RssAnon:"):
                return int(line.split()[1]) * 1024
    return 0


def trim(who):
    """Collects garbage and gives malloc's free pages back. Returns what was
    seen: {in_use, free (None: no mallinfo2), before, after} in bytes. Under
    another allocator (LD_PRELOAD) glibc's numbers describe an unused heap."""
    gc.collect()
    libc = ctypes.CDLL(None)
    before = anon_bytes()
    in_use = free = None
    if hasattr(libc, "mallinfo2"):
        libc.mallinfo2.restype = _MallInfo2
        mi = libc.mallinfo2()
        in_use, free = mi.uordblks + mi.hblkhd, mi.fordblks
    if not hasattr(libc, "malloc_trim"):
        log.info("rekindle: %s asleep: no malloc_trim in this C library, heap not trimmed", who)
        return {"in_use": in_use, "free": free, "before": before, "after": before}
    libc.malloc_trim(0)
    after = anon_bytes()
    log.info("rekindle: %s asleep: malloc holds %s MiB in use and %s MiB free; "
             "trimmed, anonymous memory %d -> %d MiB",
             who, "?" if in_use is None else in_use // MIB, "?" if free is None else free // MIB,
             before // MIB, after // MIB)
    return {"in_use": in_use, "free": free, "before": before, "after": after}


def _after(sleep, who):
    """sleep, then trim unless a sleep inside it (the engine core's GPU
    worker, in its process) trimmed already."""
    def trim_if_none(since):
        global _trims
        if _trims == since:
            _trims += 1
            try:
                trim(who)
            except Exception as e:  # vLLM is asleep: a failed trim must not fail the sleep
                log.warning("rekindle: %s asleep, heap not trimmed: %s", who, e)

    if inspect.iscoroutinefunction(sleep):
        async def wrapper(*args, **kwargs):
            since = _trims
            out = await sleep(*args, **kwargs)
            trim_if_none(since)
            return out
    else:
        def wrapper(*args, **kwargs):
            since = _trims
            out = sleep(*args, **kwargs)
            # The engine core returns a future while requests finish: its
            # executor sleeps when they have.
            if hasattr(out, "add_done_callback"):
                out.add_done_callback(lambda _: trim_if_none(since))
            else:
                trim_if_none(since)
            return out
    wrapper.__wrapped__ = sleep
    wrapper._rekindle_trim = True
    return wrapper


def patch(module):
    cls_name, who = SLEEPS[module.__name__]
    cls = getattr(module, cls_name, None)
    sleep = getattr(cls, "sleep", None)
    if sleep is None:
        log.warning("rekindle: %s has no %s.sleep (another vLLM?): the %s's heap is not trimmed "
                    "before a checkpoint", module.__name__, cls_name, who)
        return
    if not getattr(sleep, "_rekindle_trim", False):
        cls.sleep = _after(sleep, who)


class _PatchOnImport(importlib.abc.MetaPathFinder):
    """Patches a module of SLEEPS once it is imported: the plugin runs before
    the worker's module is, and must not import it where it is not used."""

    def find_spec(self, name, path, target=None):
        if name not in SLEEPS:
            return None
        spec = None
        for finder in list(sys.meta_path):  # the others, in their order
            if finder is not self and hasattr(finder, "find_spec"):
                spec = finder.find_spec(name, path, target)
                if spec is not None:
                    break
        if spec is None or not hasattr(spec.loader, "exec_module"):
            return None
        run = spec.loader.exec_module

        def exec_module(module):
            run(module)
            patch(module)
        spec.loader.exec_module = exec_module
        return spec


def install():
    """Called by the plugin in every vLLM process, maybe more than once."""
    if os.environ.get("REKINDLE_TRIM_HEAP", "1") == "0":
        return
    for name in SLEEPS:
        if name in sys.modules:
            patch(sys.modules[name])
    if not any(isinstance(f, _PatchOnImport) for f in sys.meta_path):
        sys.meta_path.insert(0, _PatchOnImport())
