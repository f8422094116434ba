"""Unit tests of datapath.py, the data-path diagram in docs/architecture.md (plain python3)."""
import importlib.util
import os
import tempfile
import unittest

spec = importlib.util.spec_from_file_location("datapath", os.path.join(os.path.dirname(__file__), "datapath.py"))
datapath = importlib.util.module_from_spec(spec)
spec.loader.exec_module(datapath)


class Committed(unittest.TestCase):
    def test_architecture_md_holds_the_scripts_output(self):
        _, span, current = datapath.committed()
        self.assertIsNotNone(span, "docs/architecture.md has lost the diagram's markers")
        self.assertEqual(current, datapath.render(),
                         "docs/architecture.md's diagram is not datapath.py's output: run 'make diagram'")

    def test_every_line_fits(self):
        for line in datapath.render().splitlines():
            self.assertLessEqual(len(line), datapath.WIDTH, line)

    def test_every_step_has_its_box(self):
        titles = [t for t, what, _ in datapath.BOXES if what is not None]
        for step in ("quiesce", "CRIU dump", "CUDA checkpoint", "package", "registry", "pull",
                     "in-place layer", "cache", "CRIU parallel fill", "CUDA restore", "wake", "weights set"):
            self.assertIn(step, titles)
        self.assertLess(titles.index("package"), titles.index("registry"))
        self.assertLess(titles.index("registry"), titles.index("pull"))

    def test_every_patch_has_a_place(self):
        named = {datapath.PATCHES[r[1]] for _, what, rooms in datapath.BOXES if what is not None
                 for r in rooms if isinstance(r, tuple) and r[0] == "P"}
        named |= {datapath.PATCHES[r[1]] for r in datapath.AROUND}
        for folder in ("containerd-patches", "runc-patches", "criu-patches"):
            for name in datapath.series(folder, datapath.ROOT):
                placed = [slug for f, slug in named if f == folder and name[5:].startswith(slug)]
                self.assertTrue(placed, f"{folder}/{name} is in no box: give it a place in docs/diagram/datapath.py")


class Lookups(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory()
        self.root = self.tmp.name
        os.mkdir(os.path.join(self.root, "criu-patches"))

    def tearDown(self):
        self.tmp.cleanup()

    def write_series(self, *names):
        with open(os.path.join(self.root, "criu-patches", "series"), "w") as f:
            f.write("# a comment\n" + "".join(n + "\n" for n in names))

    def test_a_patch_is_numbered_as_the_series_has_it(self):
        self.write_series("0001-shmem-fill-shared-memory-content-in-parallel.patch",
                          "0007-restore-fill-private-memory-with-parallel-threads.patch")
        self.assertEqual(datapath.patch("k-private", self.root), ("criu-patches", "0007"))

    def test_a_patch_gone_from_the_series_is_named(self):
        self.write_series("0001-shmem-fill-shared-memory-content-in-parallel.patch")
        with self.assertRaises(datapath.Missing) as e:
            datapath.patch("k-private", self.root)
        self.assertIn("restore-fill-private-memory-with-parallel-threads", str(e.exception))
        self.assertIn("make diagram", str(e.exception))

    def test_a_path_gone_from_the_tree_is_named(self):
        with self.assertRaises(datapath.Missing) as e:
            datapath.path("oci-checkpoint/pkg/checkpoint/quiesce.go", self.root)
        self.assertIn("quiesce.go", str(e.exception))


if __name__ == "__main__":
    unittest.main()
