"""Unit tests of serve.py: its reading of vLLM's start-up log, and the settings it adds for a
multi-GPU server (plain python3)."""
import importlib.util
import os
import unittest

spec = importlib.util.spec_from_file_location("serve", os.path.join(os.path.dirname(__file__), "serve.py"))
serve = importlib.util.module_from_spec(spec)
spec.loader.exec_module(serve)

# Lines in vLLM 0.24's format (the API server's and the EngineCore's prefixes).
COLD = """\
(APIServer pid=7) INFO 11-24 10:00:01 [api_server.py:1] vLLM API server version 0.24.0
(EngineCore pid=40) INFO 11-24 10:00:12 [default_loader.py:431] Loading weights took 1.52 seconds
(EngineCore pid=40) INFO 11-24 10:00:13 [gpu_model_runner.py:5256] Model loading took 2.26 GiB memory and 2.103140 seconds
(EngineCore pid=40) INFO 11-24 10:00:20 [backends.py:1149] Dynamo bytecode transform time: 6.81 s
(EngineCore pid=40) INFO 11-24 10:00:30 [backends.py:394] Compiling a graph for compile range (1, 8192) takes 9.90 s
(EngineCore pid=40) INFO 11-24 10:00:38 [monitor.py:53] torch.compile takes 24.71 s in total
(EngineCore pid=40) INFO 11-24 10:00:41 [gpu_model_runner.py:6657] Graph capturing finished in 2 secs, took 0.31 GiB
(EngineCore pid=40) INFO 11-24 10:00:42 [core.py:345] init engine (profile, create kv cache, warmup model) took 29.30 s
(APIServer pid=7) INFO 11-24 10:00:44 [launcher.py:1] Route: /health
(APIServer pid=7) INFO:     Application startup complete.
"""


class Phases(unittest.TestCase):
    def test_cold_start(self):
        p = serve.phases(COLD)
        self.assertEqual(p["weights_s"], 1.52)
        self.assertEqual(p["model_load_s"], 2.10314)
        self.assertEqual(p["dynamo_s"], 6.81)
        self.assertEqual(p["compile_s"], 24.71)
        self.assertEqual(p["graphs_s"], 2.0)
        self.assertEqual(p["init_engine_s"], 29.3)
        self.assertEqual(p["compile_lines"], 4)

    def test_ready_is_the_last_clock_before_startup_complete(self):
        # uvicorn's "Application startup complete" has no clock of its own.
        self.assertEqual(serve.phases(COLD)["logged_s"], 43.0)

    def test_restored_log_has_no_compile_lines(self):
        restored = "(APIServer pid=7) INFO 11-24 10:05:00 [api_server.py:1] wake up the engine with tags: None\n"
        p = serve.phases(restored)
        self.assertEqual(p["compile_lines"], 0)
        self.assertIsNone(p["compile_s"])
        self.assertIsNone(p["logged_s"])


WANT_ENV = {"NCCL_P2P_DISABLE": "1", "NCCL_NVLS_ENABLE": "0",
            "NCCL_CUMEM_ENABLE": "0", "VLLM_ALLREDUCE_USE_SYMM_MEM": "0"}


class MultiGPU(unittest.TestCase):
    def test_single_gpu_is_left_alone(self):
        for args in ([], ["--max-model-len", "2048"], ["-tp", "1"], ["--tensor-parallel-size=1", "-pp", "1"]):
            env = {}
            self.assertEqual(serve.multi_gpu(args, env), (args, None), args)
            self.assertEqual(env, {}, args)

    def test_every_form_of_the_sizes(self):
        for args, tp, pp in [(["--tensor-parallel-size", "2"], 2, 1), (["--tensor-parallel-size=4"], 4, 1),
                             (["-tp", "2"], 2, 1), (["-tp=2"], 2, 1), (["--tensor_parallel_size", "2"], 2, 1),
                             (["--pipeline-parallel-size", "2"], 1, 2), (["-pp=2"], 1, 2),
                             (["-tp", "2", "-pp", "2"], 2, 2), (["-tp", "1", "-tp", "2"], 2, 1)]:
            env = {}
            out, line = serve.multi_gpu(args, env)
            self.assertEqual(env, WANT_ENV, args)
            self.assertEqual(out, args + ["--disable-custom-all-reduce"], args)
            self.assertIn(f"tensor parallel {tp} x pipeline parallel {pp}", line, args)

    def test_the_line_says_what_and_why(self):
        _, line = serve.multi_gpu(["-tp", "2"], {})
        self.assertEqual(line.count("\n"), 0)
        for k, v in WANT_ENV.items():
            self.assertIn(f"{k}={v}", line)
        self.assertIn("and added --disable-custom-all-reduce", line)
        self.assertIn("cuda-checkpoint", line)

    def test_user_values_are_kept_and_named(self):
        env = {"NCCL_P2P_DISABLE": "0", "NCCL_NVLS_ENABLE": "0", "OTHER": "x"}
        _, line = serve.multi_gpu(["-tp", "2"], env)
        self.assertEqual(env["NCCL_P2P_DISABLE"], "0")
        self.assertEqual(env["OTHER"], "x")
        self.assertEqual({k: env[k] for k in WANT_ENV if k != "NCCL_P2P_DISABLE"},
                         {k: v for k, v in WANT_ENV.items() if k != "NCCL_P2P_DISABLE"})
        self.assertIn("kept NCCL_P2P_DISABLE=0", line)
        self.assertIn("will refuse", line)
        self.assertNotIn("NCCL_NVLS_ENABLE", line)
        self.assertNotIn("NCCL_SHM_DISABLE", line)

    def test_shared_memory_transport_is_left_on(self):
        for env in ({}, {"NCCL_SHM_DISABLE": "1"}):
            before = dict(env)
            _, line = serve.multi_gpu(["-tp", "2"], env)
            self.assertEqual(env.get("NCCL_SHM_DISABLE"), before.get("NCCL_SHM_DISABLE"))
            self.assertNotIn("NCCL_SHM_DISABLE", line)

    def test_only_kept_values_say_so(self):
        env = dict(WANT_ENV, NCCL_CUMEM_ENABLE="1")
        _, line = serve.multi_gpu(["-tp", "2", "--disable-custom-all-reduce"], env)
        self.assertEqual(line, "serve.py: tensor parallel 2 x pipeline parallel 1: kept NCCL_CUMEM_ENABLE=1 as given "
                               "(oci-checkpoint create will refuse the server)")

    def test_custom_all_reduce_flag_is_not_doubled_or_overridden(self):
        for flag in ("--disable-custom-all-reduce", "--disable_custom_all_reduce", "--no-disable-custom-all-reduce"):
            args = ["-tp", "2", flag]
            out, line = serve.multi_gpu(args, dict(WANT_ENV))
            self.assertEqual(out, args, flag)
            self.assertIn("settings a multi-GPU checkpoint needs are given", line, flag)

    def test_unreadable_size_counts_as_one(self):
        # vLLM itself refuses the flag; nothing is added for it.
        self.assertEqual(serve.multi_gpu(["-tp", "two"], {}), (["-tp", "two"], None))
        self.assertEqual(serve.multi_gpu(["--tensor-parallel-size"], {}), (["--tensor-parallel-size"], None))

    def test_values_match_the_preflight(self):
        # oci-checkpoint's preflight (pkg/engine/multigpu.go) wants the same values.
        go = open(os.path.join(os.path.dirname(__file__), "../../oci-checkpoint/pkg/engine/multigpu.go")).read()
        for k, v in serve.MULTI_GPU_ENV:
            self.assertIn(f'{{"{k}", "{v}",', go)


class WeightSet(unittest.TestCase):
    def test_a_named_set_adds_the_load_format(self):
        args, line = serve.weight_set(["--max-model-len", "2048"], {"ENGINE_WEIGHT_SET": "/rekindle/weights/q"})
        self.assertEqual(args, ["--max-model-len", "2048", "--load-format", "rekindle"])
        self.assertIn("/rekindle/weights/q", line)

    def test_no_set_changes_nothing(self):
        self.assertEqual(serve.weight_set(["-tp", "2"], {}), (["-tp", "2"], None))

    def test_a_load_format_given_wins_and_is_named(self):
        for flag in (["--load-format", "auto"], ["--load_format=auto"]):
            args, line = serve.weight_set(flag, {"ENGINE_WEIGHT_SET": "/rekindle/weights/q"})
            self.assertEqual(args, flag)
            self.assertIn("the weight set is not used", line)


if __name__ == "__main__":
    unittest.main()
