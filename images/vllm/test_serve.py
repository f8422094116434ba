"""Unit tests of serve.py's reading of vLLM's start-up log (plain python3)."""
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


if __name__ == "__main__":
    unittest.main()
