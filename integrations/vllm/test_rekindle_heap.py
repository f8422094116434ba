"""Unit tests of rekindle_heap: freed heap given back, and vLLM's sleeps
wrapped when their modules are imported (plain python3 on glibc; stand-in
vLLM modules of the same names, the real ones are run by 510-vllm.bats)."""
import asyncio
import concurrent.futures
import ctypes
import os
import shutil
import sys
import tempfile
import textwrap
import unittest

import rekindle_heap as rh

MIB = 1 << 20

MODULES = {
    "vllm/v1/worker/gpu_worker.py": """
        class Worker:
            def sleep(self, level=1):
                self.level = level
                return "slept"
        """,
    "vllm/v1/engine/core.py": """
        from vllm.v1.worker.gpu_worker import Worker

        class EngineCore:
            future = None
            def sleep(self, level=1):
                if self.future is not None:
                    return self.future
                Worker().sleep(level)
        """,
    "vllm/v1/engine/async_llm.py": """
        class AsyncLLM:
            async def sleep(self, level=1):
                return level
        """,
}


def unhook():
    """Removes install()'s finder and the stand-in vLLM modules."""
    sys.meta_path[:] = [f for f in sys.meta_path if not isinstance(f, rh._PatchOnImport)]
    for name in [n for n in sys.modules if n == "vllm" or n.startswith("vllm.")]:
        del sys.modules[name]


class Trim(unittest.TestCase):
    def test_freed_heap_is_given_back(self):
        libc = ctypes.CDLL(None)
        libc.malloc.restype = ctypes.c_void_p
        libc.free.argtypes = [ctypes.c_void_p]
        # 64 KiB blocks come from the heap (under malloc's mmap threshold);
        # one kept at the end stops free() from shrinking the heap's top.
        blocks = [libc.malloc(64 << 10) for _ in range(3200)]
        for b in blocks:
            ctypes.memset(b, 1, 64 << 10)
        keep = libc.malloc(64 << 10)
        held = rh.anon_bytes()
        for b in blocks:
            libc.free(b)
        seen = rh.trim("test")
        libc.free(keep)
        self.assertGreater(seen["free"], 150 * MIB)
        self.assertGreater(seen["before"], held - 16 * MIB)  # free() alone gave little back
        self.assertLess(seen["after"], seen["before"] - 150 * MIB)


class Wrap(unittest.TestCase):
    def setUp(self):
        self.env = os.environ.pop("REKINDLE_TRIM_HEAP", None)
        unhook()
        self.tmp = tempfile.mkdtemp()
        for d in ("vllm", "vllm/v1", "vllm/v1/worker", "vllm/v1/engine"):
            os.makedirs(os.path.join(self.tmp, d))
            open(os.path.join(self.tmp, d, "__init__.py"), "w").close()
        for path, text in MODULES.items():
            with open(os.path.join(self.tmp, path), "w") as f:
                f.write(textwrap.dedent(text))
        sys.path.insert(0, self.tmp)
        self.trims = []
        self.real_trim, rh.trim = rh.trim, self.trims.append

    def tearDown(self):
        rh.trim = self.real_trim
        sys.path.remove(self.tmp)
        unhook()
        os.environ.pop("REKINDLE_TRIM_HEAP", None)
        if self.env is not None:
            os.environ["REKINDLE_TRIM_HEAP"] = self.env
        shutil.rmtree(self.tmp)

    def test_a_sleep_imported_after_install_trims_after_it(self):
        rh.install()
        rh.install()  # the plugin may run twice: one wrapper
        from vllm.v1.worker.gpu_worker import Worker
        w = Worker()
        self.assertEqual(w.sleep(2), "slept")
        self.assertEqual(w.level, 2)
        self.assertEqual(self.trims, ["GPU worker"])

    def test_a_finder_that_steps_aside_and_asks_importlib_again(self):
        import importlib.util

        class AsksAgain:  # as vllm/env_override.py's finder does for its module
            def find_spec(self, name, path, target=None):
                if not name.endswith("gpu_worker"):
                    return None
                sys.meta_path.remove(self)
                return importlib.util.find_spec(name)
        rh.install()
        sys.meta_path.insert(1, AsksAgain())
        try:
            from vllm.v1.worker.gpu_worker import Worker
        finally:
            sys.meta_path[:] = [f for f in sys.meta_path if not isinstance(f, AsksAgain)]
        Worker().sleep(2)
        self.assertEqual(self.trims, ["GPU worker"])

    def test_a_module_imported_before_install_is_wrapped_too(self):
        from vllm.v1.engine.async_llm import AsyncLLM
        rh.install()
        self.assertEqual(asyncio.run(AsyncLLM().sleep(2)), 2)
        self.assertEqual(self.trims, ["API server"])

    def test_the_engine_core_with_its_worker_inside_trims_once(self):
        rh.install()
        from vllm.v1.engine.core import EngineCore
        EngineCore().sleep(2)
        self.assertEqual(self.trims, ["GPU worker"])

    def test_an_engine_core_waiting_for_requests_trims_when_asleep(self):
        rh.install()
        from vllm.v1.engine.core import EngineCore
        core = EngineCore()
        core.future = concurrent.futures.Future()
        self.assertIs(core.sleep(2), core.future)
        self.assertEqual(self.trims, [])
        core.future.set_result(None)
        self.assertEqual(self.trims, ["engine core"])

    def test_a_failed_trim_leaves_the_sleep_done(self):
        def fail(who):
            raise OSError("no /proc")
        rh.trim = fail
        rh.install()
        from vllm.v1.worker.gpu_worker import Worker
        with self.assertLogs("vllm.rekindle", "WARNING") as logs:
            self.assertEqual(Worker().sleep(2), "slept")
        self.assertIn("GPU worker asleep, heap not trimmed: no /proc", logs.output[0])

    def test_another_vllm_is_named_and_left_alone(self):
        with open(os.path.join(self.tmp, "vllm/v1/engine/async_llm.py"), "w") as f:
            f.write("class AsyncLLMEngine:\n    pass\n")
        rh.install()
        with self.assertLogs("vllm.rekindle", "WARNING") as logs:
            import vllm.v1.engine.async_llm  # noqa: F401
        self.assertIn("no AsyncLLM.sleep", logs.output[0])
        self.assertIn("API server's heap is not trimmed", logs.output[0])

    def test_turned_off_nothing_is_wrapped(self):
        os.environ["REKINDLE_TRIM_HEAP"] = "0"
        rh.install()
        from vllm.v1.worker.gpu_worker import Worker
        Worker().sleep(2)
        self.assertEqual(self.trims, [])


if __name__ == "__main__":
    unittest.main()
