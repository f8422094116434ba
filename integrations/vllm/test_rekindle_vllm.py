"""Unit tests of rekindle_vllm's checks: a weight set against the model
folder it must match, and the set's identity across a reload (plain
python3; vLLM, torch and the copies are tested on a GPU host, 510-vllm.bats)."""
import os
import shutil
import struct
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "weights"))
import rekindle_vllm as rv  # noqa: E402
import rekindle_weights as rw  # noqa: E402
from test_rekindle_weights import bf16, manifest, st_file  # noqa: E402

BIG = bf16([float(i % 251) for i in range(6000)])  # longer than two samples


def tensors(**change):
    """A model's tensors: [(name, dtype, shape, bytes)], with changes."""
    t = {"model.embed_tokens.weight": ("BF16", (2, 3000), BIG),
         "model.norm.weight": ("BF16", (3,), bf16([1, 1, 1])),
         "lm_head.weight": ("BF16", (3000, 2), BIG)}
    t.update(change)
    return [(n, *v) for n, v in t.items() if v is not None]


class Compare(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.mkdtemp()
        self.model = os.path.join(self.tmp, "model")
        self.set = os.path.join(self.tmp, "sets", "qwen")
        os.makedirs(self.model)
        os.makedirs(self.set)
        st_file(os.path.join(self.model, "model.safetensors"), tensors())

    def tearDown(self):
        shutil.rmtree(self.tmp)

    def make_set(self, ts):
        st_file(os.path.join(self.set, "model.safetensors"), ts)
        manifest(self.set, ["model.safetensors"])
        return rw.open_set(self.set).map()

    def refused(self, ts, *words):
        ws = self.make_set(ts)
        with self.assertRaises(rv.Mismatch) as e:
            rv.compare(ws, self.model)
        for w in ("weight set qwen", self.model) + words:
            self.assertIn(w, str(e.exception))
        ws.close()

    def test_the_same_model_passes(self):
        ws = self.make_set(tensors())
        rv.compare(ws, self.model)
        self.assertTrue(ws.current())
        ws.close()

    def test_another_shape_names_the_tensor(self):
        self.refused(tensors(**{"lm_head.weight": ("BF16", (2, 3000), BIG)}),
                     "tensor lm_head.weight is BF16[2, 3000] in the set, BF16[3000, 2] in the model's files")

    def test_another_dtype_names_the_tensor(self):
        self.refused(tensors(**{"model.norm.weight": ("F16", (3,), bf16([1, 1, 1]))}),
                     "tensor model.norm.weight is F16[3]")

    def test_a_missing_and_an_extra_tensor(self):
        self.refused(tensors(**{"model.norm.weight": None}), "tensor model.norm.weight is missing from the set")
        self.refused(tensors(**{"extra.bias": ("BF16", (1,), bf16([0]))}), "tensor extra.bias is in the set")

    def test_other_bytes_of_the_same_shape(self):
        # The last element differs: the sample at the tensor's end sees it.
        other = BIG[:-2] + bf16([7])
        self.refused(tensors(**{"lm_head.weight": ("BF16", (3000, 2), other)}),
                     "tensor lm_head.weight holds other bytes", "at byte 7904")

    def test_a_truncated_set_file_is_refused_when_opened(self):
        self.make_set(tensors()).close()
        path = os.path.join(self.set, "model.safetensors")
        os.truncate(path, os.path.getsize(path) - 10)
        with self.assertRaises(rw.SetError) as e:
            rw.open_set(self.set)
        self.assertIn("truncated", str(e.exception))

    def test_no_set_falls_back(self):
        ws, why = rv.attach(os.path.join(self.tmp, "sets", "absent"), self.model)
        self.assertIsNone(ws)
        self.assertTrue(why)

    def test_a_set_mapped_before_a_restore_is_judged_by_its_files_now(self):
        # A restore maps whatever files of the same sizes are at the path:
        # here the header is rewritten in place, one shape swapped.
        ws = self.make_set(tensors())
        rv._attached[ws.path] = ws
        path = os.path.join(self.set, "model.safetensors")
        with open(path, "r+b") as f:
            n = struct.unpack("<Q", f.read(8))[0]
            head = f.read(n).replace(b"[3000, 2]", b"[2, 3000]")
            f.seek(8)
            f.write(head)
        with self.assertRaises(rv.Mismatch) as e:
            rv.attach(self.set, self.model)
        self.assertIn("tensor lm_head.weight is BF16[2, 3000] in the set", str(e.exception))
        rv._attached.clear()
        ws.close()

    def test_a_set_loaded_again_is_not_current(self):
        ws = self.make_set(tensors())
        self.assertTrue(ws.current())
        # The service writes a new file and renames it over the old one.
        path = os.path.join(self.set, "model.safetensors")
        shutil.copy(path, path + ".new")
        os.rename(path + ".new", path)
        self.assertFalse(ws.current())
        ws.close()

    def test_an_evicted_set_is_not_current(self):
        ws = self.make_set(tensors())
        os.unlink(os.path.join(self.set, rw.MANIFEST))
        self.assertFalse(ws.current())
        ws.close()

    def test_the_index_names_the_files(self):
        os.rename(os.path.join(self.model, "model.safetensors"), os.path.join(self.model, "a.safetensors"))
        st_file(os.path.join(self.model, "unused.safetensors"), [("x", "U8", (1,), b"\0")])
        with open(os.path.join(self.model, "model.safetensors.index.json"), "w") as f:
            f.write('{"weight_map": {"lm_head.weight": "a.safetensors", "model.norm.weight": "a.safetensors",'
                    ' "model.embed_tokens.weight": "a.safetensors"}}')
        self.assertEqual(rv.model_files(self.model), [os.path.join(self.model, "a.safetensors")])
        ws = self.make_set(tensors())
        rv.compare(ws, self.model)
        ws.close()


class Loader(unittest.TestCase):
    """The loader class register() adds, against stand-ins of the two vLLM
    modules it uses (vLLM itself is tested on a GPU host)."""

    def setUp(self):
        import types
        self.registered = {}
        loaders = []

        class Default:
            counter_before_loading_weights = 0.0

            def __init__(self, load_config):
                self.load_config = load_config
                loaders.append(self)

            def get_all_weights(self, model_config, model):
                if self.load_config.load_format == "rekindle":  # as vLLM's _prepare_weights does
                    raise ValueError("Unknown load_format: rekindle")
                return iter([("from-the-folder", None)])

        ml = types.ModuleType("vllm.model_executor.model_loader")
        ml.register_model_loader = lambda name: lambda cls: self.registered.setdefault(name, cls)
        dl = types.ModuleType("vllm.model_executor.model_loader.default_loader")
        dl.DefaultModelLoader = Default
        self.modules = {"vllm": types.ModuleType("vllm"), "vllm.model_executor": types.ModuleType("vllm.model_executor"),
                        "vllm.model_executor.model_loader": ml, "vllm.model_executor.model_loader.default_loader": dl}
        self.saved = {k: sys.modules.get(k) for k in self.modules}
        sys.modules.update(self.modules)
        self.loaders = loaders
        self.env = os.environ.pop("ENGINE_WEIGHT_SET", None)

    def tearDown(self):
        for k, v in self.saved.items():
            if v is None:
                sys.modules.pop(k, None)
            else:
                sys.modules[k] = v
        if self.env is not None:
            os.environ["ENGINE_WEIGHT_SET"] = self.env
        # register() also installed rekindle_heap's import hook.
        sys.meta_path[:] = [f for f in sys.meta_path if not isinstance(f, rv.rekindle_heap._PatchOnImport)]

    def test_no_set_reads_the_model_folder_with_vllms_default_format(self):
        import types
        rv.register()
        cfg = types.SimpleNamespace(load_format="rekindle")
        loader = self.registered["rekindle"](cfg)
        model_config = types.SimpleNamespace(model="/models/model")
        for env in (None, "/nonexistent/rekindle/weights/q"):
            if env:
                os.environ["ENGINE_WEIGHT_SET"] = env
            with self.assertLogs("vllm.rekindle", "WARNING") as logs:
                got = list(loader.get_all_weights(model_config, None))
            self.assertEqual(got, [("from-the-folder", None)])
            self.assertIn("weights from the model folder /models/model, not a weight set", logs.output[0])
        self.assertEqual(cfg.load_format, "rekindle", "the shared load config is left as it was")
        self.assertGreater(loader.counter_before_loading_weights, 0)
        os.environ.pop("ENGINE_WEIGHT_SET", None)


if __name__ == "__main__":
    unittest.main()
