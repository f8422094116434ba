"""Unit tests of serve.py: the flags and settings it starts SGLang with, and
its reading of SGLang's start-up log (plain python3)."""
import importlib.util
import os
import unittest

spec = importlib.util.spec_from_file_location("serve", os.path.join(os.path.dirname(__file__), "serve.py"))
serve = importlib.util.module_from_spec(spec)
spec.loader.exec_module(serve)

COLD = """\
[2026-11-28 10:00:01] server_args=ServerArgs(model_path='/models/model', ...)
[2026-11-28 10:00:09 TP0] Load weight begin. avail mem=138.20 GB
[2026-11-28 10:00:11 TP0] Load weight end. elapsed=1.87 s, type=Qwen2ForCausalLM, avail mem=135.90 GB, mem usage=2.30 GB.
Capturing batches (bs=1 avail_mem=20.1 GB): 100%|##########| 52/52 [00:04<00:00, 11.2it/s]
[2026-11-28 10:00:30] The server is fired up and ready to roll!
"""


class Command(unittest.TestCase):
    def test_memory_saver_on_by_default(self):
        argv = serve.command("/models/model", ["--mem-fraction-static", "0.5"], {})
        self.assertEqual(argv, ["--model-path", "/models/model", "--host", "0.0.0.0", "--port", "30000",
                                "--enable-memory-saver", "--mem-fraction-static", "0.5"])

    def test_the_images_defaults_unless_the_flags_choose(self):
        env = {"ENGINE_SGLANG_DEFAULTS": "--attention-backend triton --sampling-backend pytorch --disable-radix-cache"}
        argv = serve.command("/m", ["--attention-backend=fa3"], env)
        self.assertEqual(argv.count("--attention-backend"), 0)
        self.assertEqual(argv[-4:], ["--sampling-backend", "pytorch", "--disable-radix-cache", "--attention-backend=fa3"])

    def test_memory_saver_left_out_when_asked(self):
        self.assertNotIn("--enable-memory-saver", serve.command("/m", [], {"ENGINE_SGLANG_MEMORY_SAVER": "0"}))


class Preload(unittest.TestCase):
    def test_the_saver_hook_is_left_to_sglang(self):
        env = {"LD_PRELOAD": "/s/torch_memory_saver_hook_mode_preload_cu13.abi3.so:/x/libother.so"}
        serve.without_saver_preload(env)
        self.assertEqual(env["LD_PRELOAD"], "/x/libother.so")
        env = {"LD_PRELOAD": "/s/torch_memory_saver_hook_mode_preload_cu13.abi3.so"}
        serve.without_saver_preload(env)
        self.assertNotIn("LD_PRELOAD", env)


class Kernels(unittest.TestCase):
    def test_the_sites_prebuilt_kernels_are_named(self):
        import tempfile
        with tempfile.TemporaryDirectory() as d:
            os.makedirs(os.path.join(d, ".cache", "tvm-ffi"))
            env = {"ENGINE_SITE": "/nowhere:" + d}
            serve.prebuilt_kernels(env)
            self.assertEqual(env["TVM_FFI_CACHE_DIR"], os.path.join(d, ".cache", "tvm-ffi"))
            env = {"ENGINE_SITE": d, "TVM_FFI_CACHE_DIR": "/mine"}
            serve.prebuilt_kernels(env)
            self.assertEqual(env["TVM_FFI_CACHE_DIR"], "/mine")


class MultiGPU(unittest.TestCase):
    def test_one_gpu_changes_nothing(self):
        env = {}
        self.assertEqual(serve.multi_gpu(["--mem-fraction-static", "0.5"], env), (["--mem-fraction-static", "0.5"], None))
        self.assertEqual(env, {})

    def test_tp2_sets_nccl_and_drops_the_custom_all_reduce(self):
        for args in (["--tp-size", "2"], ["--tp=2"], ["--tensor-parallel-size", "2"], ["--tp_size", "2"]):
            env = {}
            out, line = serve.multi_gpu(args, env)
            self.assertEqual(out, args + ["--disable-custom-all-reduce"], args)
            self.assertEqual(env, {"NCCL_P2P_DISABLE": "1", "NCCL_NVLS_ENABLE": "0", "NCCL_CUMEM_ENABLE": "0"})
            self.assertIn("tensor parallel 2", line)

    def test_a_users_value_is_kept_and_said(self):
        env = {"NCCL_P2P_DISABLE": "0"}
        out, line = serve.multi_gpu(["--tp", "2", "--disable-custom-all-reduce"], env)
        self.assertEqual(env["NCCL_P2P_DISABLE"], "0")
        self.assertEqual(out.count("--disable-custom-all-reduce"), 1)
        self.assertIn("kept NCCL_P2P_DISABLE=0", line)


class Phases(unittest.TestCase):
    def test_cold_start(self):
        p = serve.phases(COLD)
        self.assertEqual(p["weights_s"], 1.87)
        self.assertEqual(p["cold_lines"], 2)
        self.assertEqual(p["logged_s"], 29)

    def test_a_restored_servers_log_has_no_cold_lines(self):
        p = serve.phases("[2026-11-28 10:05:00] Prefill batch. #new-seq: 1\n")
        self.assertEqual((p["cold_lines"], p["weights_s"], p["logged_s"]), (0, None, None))


if __name__ == "__main__":
    unittest.main()
