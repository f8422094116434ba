"""Unit tests of datapath.py, the data-path diagram in docs/architecture.md (plain python3)."""
import importlib.util
import os
import re
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


# Patches are named outside their folder as FOLDER/SLUG: the file name without
# its number, "-" and ".patch" (and without a trailing "-"), e.g.
# containerd-patches/runc-shim-name-CRIU-s-errors-when-a-restore-fails.
PATCH_FOLDERS = ("containerd-patches", "runc-patches", "criu-patches")
SCANNED_DIRS = ("docs", "scripts", "bench", "tests", "images", "ansible", "systemd", "oci-checkpoint", "restore", "contract")
SCANNED_EXTS = (".md", ".sh", ".bash", ".bats", ".py", ".go", ".c", ".h", ".yml", ".yaml", ".mk")
REFERENCE = re.compile(r"\b(containerd|runc|criu)-patches/([A-Za-z0-9_.-]+)")
NUMBERED = re.compile(r"\b(containerd|runc|criu)-patches/[0-9]{4}")


def scanned_files(root):
    """The text files outside the series folders that may name a patch, relative to root."""
    files = ["README.md", "Makefile"]
    for top in SCANNED_DIRS:
        for d, dirs, names in os.walk(os.path.join(root, top)):
            dirs[:] = sorted(x for x in dirs if not x.startswith(".") and x not in ("node_modules", "__pycache__"))
            for n in sorted(names):
                if n.endswith(SCANNED_EXTS) or n == "Makefile":
                    files.append(os.path.relpath(os.path.join(d, n), root))
    return [f for f in files if os.path.isfile(os.path.join(root, f))]


def patch_slugs(root):
    """FOLDER/SLUG for every patch of every series."""
    slugs = set()
    for folder in PATCH_FOLDERS:
        for name in datapath.series(folder, root):
            slugs.add(folder + "/" + re.sub(r"^[0-9]{4}-", "", name).removesuffix(".patch").rstrip("-"))
    return slugs


def bad_patch_references(root):
    """file:line: what, for each reference that names no patch or names one by number."""
    slugs = patch_slugs(root)
    bad = []
    for f in scanned_files(root):
        with open(os.path.join(root, f), encoding="utf-8", errors="replace") as fh:
            for i, line in enumerate(fh, 1):
                for m in NUMBERED.finditer(line):
                    bad.append(f"{f}:{i}: {m.group(0)} numbers a patch: name it as {m.group(1)}-patches/SLUG")
                for m in REFERENCE.finditer(line):
                    folder = m.group(1) + "-patches"
                    name = m.group(2).rstrip(".-")
                    if NUMBERED.match(m.group(0)) or not name:
                        continue
                    if os.path.isfile(os.path.join(root, folder, name)):  # README.md, series, tests
                        continue
                    if folder + "/" + name not in slugs:
                        bad.append(f"{f}:{i}: {folder}/{name} names no patch of {folder}/series")
    return bad


class PatchReferences(unittest.TestCase):
    def test_patch_references_name_existing_patches(self):
        bad = bad_patch_references(datapath.ROOT)
        self.assertEqual(bad, [], "\n" + "\n".join(bad))

    def test_a_stale_or_numbered_reference_is_named(self):
        with tempfile.TemporaryDirectory() as root:
            for folder in PATCH_FOLDERS:
                os.mkdir(os.path.join(root, folder))
                with open(os.path.join(root, folder, "series"), "w") as f:
                    f.write("0001-a-patch-s-subject-cut-off-.patch\n")
            os.makedirs(os.path.join(root, "docs"))
            with open(os.path.join(root, "docs", "x.md"), "w") as f:
                # Spelt apart, so that this file's own scan does not find them.
                f.write("ok: criu" "-patches/a-patch-s-subject-cut-off. and runc" "-patches/series\n"
                        "gone: (containerd" "-patches/a-patch-renamed)\n"
                        "numbered: runc" "-patches/0001 here\n")
            for name in ("README.md", "Makefile"):
                open(os.path.join(root, name), "w").close()
            bad = bad_patch_references(root)
            self.assertEqual(len(bad), 2, bad)
            self.assertTrue(bad[0].startswith("docs/x.md:2: containerd" "-patches/a-patch-renamed names no patch"), bad)
            self.assertTrue(bad[1].startswith("docs/x.md:3: runc" "-patches/0001 numbers a patch"), bad)


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
