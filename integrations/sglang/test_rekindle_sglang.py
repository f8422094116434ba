"""Unit tests of rekindle_sglang's hook: which weights SGLang's loader gets
(plain python3; SGLang, torch and the copies are tested on a GPU host,
520-sglang.bats)."""
import asyncio
import enum
import os
import shutil
import sys
import tempfile
import types
import unittest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "weights"))
import rekindle_model_set as rms  # noqa: E402
import rekindle_sglang as rs  # noqa: E402
from test_rekindle_weights import bf16, manifest, st_file  # noqa: E402

TENSORS = [("model.norm.weight", "BF16", (3,), bf16([1, 1, 1])), ("lm_head.weight", "BF16", (2, 3), bf16([1, 2, 3, 4, 5, 6]))]


def original(loader, source):
    return ["from the folder", source.model_or_path]


class Hook(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.mkdtemp()
        self.model = os.path.join(self.tmp, "model")
        self.set = os.path.join(self.tmp, "sets", "qwen")
        os.makedirs(self.model)
        os.makedirs(self.set)
        st_file(os.path.join(self.model, "model.safetensors"), TENSORS)
        self.source = types.SimpleNamespace(model_or_path=self.model, prefix="")
        self.env = dict(os.environ)
        # without torch: no registration with CUDA, and the set's tensor names for its tensors
        self.orig = rms.weights, rms.rw.WeightSet.register
        rms.weights = lambda ws, log: sorted(ws.tensors)
        rms.rw.WeightSet.register = lambda ws, device=None: None

    def tearDown(self):
        rms.weights, rms.rw.WeightSet.register = self.orig
        for ws in rms._attached.values():
            ws.close()
        rms._attached.clear()
        os.environ.clear()
        os.environ.update(self.env)
        shutil.rmtree(self.tmp)

    def test_no_set_named_reads_the_folder(self):
        os.environ.pop("ENGINE_WEIGHT_SET", None)
        self.assertEqual(rs.weights_iterator(original, None, self.source), ["from the folder", self.model])

    def test_a_set_not_loaded_reads_the_folder(self):
        os.environ["ENGINE_WEIGHT_SET"] = self.set
        with self.assertLogs("sglang.rekindle", "WARNING") as logs:
            self.assertEqual(rs.weights_iterator(original, None, self.source)[0], "from the folder")
        self.assertIn("not a weight set", logs.output[0])

    def test_the_models_set_is_read(self):
        st_file(os.path.join(self.set, "model.safetensors"), TENSORS)
        manifest(self.set, ["model.safetensors"])
        os.environ["ENGINE_WEIGHT_SET"] = self.set
        self.assertEqual(rs.weights_iterator(original, None, self.source), ["lm_head.weight", "model.norm.weight"])

    def test_another_models_set_fails_naming_the_set_and_tensor(self):
        st_file(os.path.join(self.set, "model.safetensors"), [("model.norm.weight", "BF16", (4,), bf16([1, 1, 1, 1]))] + TENSORS[1:])
        manifest(self.set, ["model.safetensors"])
        os.environ["ENGINE_WEIGHT_SET"] = self.set
        with self.assertRaises(rms.Mismatch) as e:
            rs.weights_iterator(original, None, self.source)
        self.assertIn("weight set qwen", str(e.exception))
        self.assertIn("tensor model.norm.weight is BF16[4]", str(e.exception))

    def test_a_prefixed_source_is_not_the_models(self):
        os.environ["ENGINE_WEIGHT_SET"] = self.set
        self.source.prefix = "draft."
        self.assertEqual(rs.weights_iterator(original, None, self.source)[0], "from the folder")


class Status(enum.Enum):  # SGLang's ServerStatus, the members the gate uses
    Up = "Up"
    Starting = "Starting"


class Manager:
    """A stand-in for SGLang's TokenizerManager: the calls the gate wraps."""

    def __init__(self, backup=False):
        self.server_status = Status.Up
        self.server_args = types.SimpleNamespace(enable_weights_cpu_backup=backup)
        self.reload_ok = True

    async def release(self, obj):
        return None

    async def resume(self, obj):
        return None

    async def update(self, obj):
        return (self.reload_ok, "message", 0)

    async def generate(self, obj):
        yield {"text": "ok"}


def run(coro):
    return asyncio.run(coro)


def first(agen):
    async def go():
        return await agen.__anext__()
    return run(go())


class GateTest(unittest.TestCase):
    def setUp(self):
        mod = types.ModuleType("sglang.srt.managers.tokenizer_manager")
        mod.ServerStatus = Status
        self.saved = {k: sys.modules.get(k) for k in ("sglang", "sglang.srt", "sglang.srt.managers", mod.__name__)}
        for k in self.saved:
            sys.modules[k] = types.ModuleType(k)
        sys.modules[mod.__name__] = mod
        rs.gate = rs.Gate()
        self.m = Manager()

    def tearDown(self):
        for k, v in self.saved.items():
            if v is None:
                sys.modules.pop(k, None)
            else:
                sys.modules[k] = v

    def call(self, hook, method, tags=None):
        return run(hook(method, self.m, types.SimpleNamespace(tags=tags)))

    def generate(self):
        return first(rs.on_generate(Manager.generate, self.m, {}))

    def test_open_before_any_release(self):
        self.assertEqual(self.generate(), {"text": "ok"})

    def test_closed_from_release_until_resume_and_reload(self):
        self.call(rs.on_release, Manager.release)
        self.assertEqual(self.m.server_status, Status.Starting, "/health answers 503 while released")
        with self.assertRaisesRegex(ValueError, "memory .*kv_cache.* is released") as e:
            self.generate()
        self.assertEqual(e.exception.status_code, 503)
        self.call(rs.on_resume, Manager.resume)
        with self.assertRaisesRegex(ValueError, "weights were dropped on release and are not loaded again"):
            self.generate()
        self.assertEqual(self.m.server_status, Status.Starting)
        self.call(rs.on_update_from_disk, Manager.update)
        self.assertEqual(self.m.server_status, Status.Up)
        self.assertEqual(self.generate(), {"text": "ok"})

    def test_a_failed_reload_keeps_it_closed(self):
        self.call(rs.on_release, Manager.release)
        self.call(rs.on_resume, Manager.resume)
        self.m.reload_ok = False
        self.call(rs.on_update_from_disk, Manager.update)
        with self.assertRaisesRegex(ValueError, "not loaded again"):
            self.generate()
        self.assertEqual(self.m.server_status, Status.Starting)

    def test_weights_kept_in_host_memory_need_no_reload(self):
        self.m = Manager(backup=True)
        self.call(rs.on_release, Manager.release)
        self.call(rs.on_resume, Manager.resume)
        self.assertEqual(self.generate(), {"text": "ok"})

    def test_tags_resumed_one_by_one(self):
        self.call(rs.on_release, Manager.release, ["kv_cache", "weights"])
        self.call(rs.on_resume, Manager.resume, ["weights"])
        with self.assertRaisesRegex(ValueError, r"memory \(kv_cache\) is released"):
            self.generate()


class FakeCuda:
    def __init__(self):
        self.reserved, self.calls = 3 << 30, []

    def memory_reserved(self):
        return self.reserved

    def empty_cache(self):
        self.calls.append("empty_cache")
        self.reserved = 1 << 30

    def mem_get_info(self):
        return 140 << 30, 143 << 30


class EmptyCache(unittest.TestCase):
    """Torch's free cached blocks handed back as the scheduler releases its
    memory, so that CUDA's checkpoint does not copy them."""

    def setUp(self):
        self.cuda = FakeCuda()
        self.saved = sys.modules.get("torch"), os.environ.get("REKINDLE_SGLANG_EMPTY_CACHE")
        sys.modules["torch"] = types.SimpleNamespace(cuda=self.cuda)
        os.environ.pop("REKINDLE_SGLANG_EMPTY_CACHE", None)

    def tearDown(self):
        torch, env = self.saved
        if torch is None:
            sys.modules.pop("torch", None)
        else:
            sys.modules["torch"] = torch
        if env is not None:
            os.environ["REKINDLE_SGLANG_EMPTY_CACHE"] = env

    def release(self, updater, req):
        self.cuda.calls.append(("release", updater, req))
        return "released"

    def test_emptied_before_the_release_and_its_result_kept(self):
        with self.assertLogs("sglang.rekindle", "INFO") as logs:
            self.assertEqual(rs.on_scheduler_release(self.release, "updater", "req"), "released")
        self.assertEqual(self.cuda.calls, ["empty_cache", ("release", "updater", "req")])
        self.assertIn("3072 -> 1024 MiB reserved; released: 3072 MiB of the GPU in use", logs.output[0])

    def test_kept_when_asked(self):
        os.environ["REKINDLE_SGLANG_EMPTY_CACHE"] = "0"
        self.assertEqual(rs.on_scheduler_release(self.release, "updater", "req"), "released")
        self.assertEqual(self.cuda.calls, [("release", "updater", "req")])

    def test_registered_on_the_schedulers_release(self):
        got = []
        hooks = types.ModuleType("sglang.srt.plugins.hook_registry")
        hooks.HookType = enum.Enum("HookType", "AROUND AFTER")
        hooks.HookRegistry = types.SimpleNamespace(register=lambda t, h, k: got.append((t, h, k)))
        names = ("sglang", "sglang.srt", "sglang.srt.plugins", hooks.__name__)
        saved = {k: sys.modules.get(k) for k in names}
        sys.modules.update({k: types.ModuleType(k) for k in names[:-1]}, **{hooks.__name__: hooks})
        try:
            rs.register()
        finally:
            for k, v in saved.items():
                sys.modules.pop(k) if v is None else sys.modules.__setitem__(k, v)
        target = "sglang.srt.managers.scheduler_components.weight_updater.SchedulerWeightUpdaterManager.release_memory_occupation"
        self.assertIn((target, rs.on_scheduler_release, hooks.HookType.AROUND), got)


if __name__ == "__main__":
    unittest.main()
