"""Unit tests of rekindle_weights (stdlib unittest).

    cd integrations/weights && python3 -m unittest -v test_rekindle_weights

Parsing, validation and mapping always run; the torch views need torch, the
registration and GPU copies a CUDA device: those skip, saying so, elsewhere.
"""

import json
import os
import struct
import tempfile
import unittest

import rekindle_weights as rw

try:
    import torch
except ImportError:
    torch = None
CUDA = torch is not None and torch.cuda.is_available()
NO_TORCH = "torch is not installed for this python: the torch views are not tested"
NO_CUDA = "no CUDA device (or no torch): registration and GPU copies are not tested"


def st_file(path, tensors, meta=None, pad=True):
    """Write a safetensors file: tensors = [(name, dtype, shape, bytes)]."""
    head, off, blobs = {}, 0, []
    if meta is not None:
        head["__metadata__"] = meta
    for name, dtype, shape, data in tensors:
        head[name] = {"dtype": dtype, "shape": list(shape), "data_offsets": [off, off + len(data)]}
        off += len(data)
        blobs.append(data)
    raw = json.dumps(head).encode()
    if pad:
        raw += b" " * (-len(raw) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(raw)) + raw + b"".join(blobs))
    return os.path.getsize(path)


def manifest(d, files, name=None, **extra):
    ent = [{"name": f, "size": os.path.getsize(os.path.join(d, f))} for f in files]
    man = {"name": name or os.path.basename(d), "files": ent, "bytes": sum(e["size"] for e in ent),
           "loaded_at": "2026-11-24T00:00:00Z", "sources": ["/weights/x.safetensors"], **extra}
    with open(os.path.join(d, rw.MANIFEST), "w") as f:
        json.dump(man, f)


def bf16(vals):
    """bf16 bit patterns of small floats (the top half of their float32)."""
    return b"".join(struct.pack("<f", v)[2:] for v in vals)


class Base(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory()
        self.dir = os.path.join(self.tmp.name, "tiny")
        os.mkdir(self.dir)

    def tearDown(self):
        self.tmp.cleanup()

    def make(self, files=None, meta=None):
        """A two-file set: a.safetensors (bf16 w [2,3], f32 b [4]),
        b.safetensors (i64 n [2], u8 empty [0])."""
        files = files or {
            "a.safetensors": [("w", "BF16", (2, 3), bf16([1, 2, 3, 4, 5, 6])),
                              ("b", "F32", (4,), struct.pack("<4f", 0.5, 1.5, 2.5, 3.5))],
            "b.safetensors": [("n", "I64", (2,), struct.pack("<2q", -7, 9)), ("e", "U8", (0,), b"")],
        }
        for fn, ts in files.items():
            st_file(os.path.join(self.dir, fn), ts, meta if meta is not None else {"rekindle.checksum": "c0ffee"})
        manifest(self.dir, list(files))
        return self.dir

    def path(self, fn):
        return os.path.join(self.dir, fn)

    def assertSetError(self, fragment, exc=rw.SetError):
        with self.assertRaises(exc) as cm:
            rw.open_set(self.dir)
        self.assertIn(fragment, str(cm.exception))
        return str(cm.exception)


class ParseTest(Base):
    def test_open_reads_manifest_and_headers(self):
        ws = rw.open_set(self.make())
        self.assertEqual(ws.name, "tiny")
        self.assertEqual(ws.files, ["a.safetensors", "b.safetensors"])
        self.assertEqual(sorted(ws.tensors), ["b", "e", "n", "w"])
        w = ws.tensors["w"]
        self.assertEqual((w.dtype, w.shape, w.nbytes, w.file), ("BF16", (2, 3), 12, self.path("a.safetensors")))
        self.assertEqual(w.start % 8, 0)
        self.assertEqual(ws.meta("rekindle.checksum"), "c0ffee")
        self.assertIsNone(ws.meta("nothing"))
        self.assertEqual(ws.bytes, sum(os.path.getsize(self.path(f)) for f in ws.files))
        self.assertIn("w", ws)

    def test_absent_and_not_loaded_are_unavailable(self):
        ws, why = rw.probe(os.path.join(self.tmp.name, "nope"))
        self.assertIsNone(ws)
        self.assertIn("does not exist", why)
        self.assertIn("rekindle.dev/weights", why)
        st_file(self.path("a.safetensors"), [("x", "U8", (1,), b"\1")])
        ws, why = rw.probe(self.dir)  # files, but no manifest yet: still loading
        self.assertIsNone(ws)
        self.assertIn("not loaded", why)
        with self.assertRaises(rw.Unavailable):
            rw.open_set(self.dir)

    def test_bad_manifests_say_what(self):
        self.make()
        m = os.path.join(self.dir, rw.MANIFEST)
        cases = [
            (b"{not json", "not JSON"),
            (b"[]", 'no "files" list'),
            (json.dumps({"files": []}).encode(), 'no "files" list'),
            (json.dumps({"files": [{"name": "a.safetensors"}]}).encode(), 'needs a "name" and a "size"'),
            (json.dumps({"files": [{"name": "../x", "size": 1}]}).encode(), "not a plain file name"),
            (json.dumps({"files": [{"name": rw.MANIFEST, "size": 1}]}).encode(), "not a plain file name"),
            (json.dumps({"files": [{"name": "gone.safetensors", "size": 1}]}).encode(), "listed in rekindle-set.json but missing"),
            (json.dumps({"files": [{"name": "a.safetensors", "size": 3}]}).encode(), "rekindle-set.json says 3"),
        ]
        for raw, frag in cases:
            with self.subTest(frag=frag):
                with open(m, "wb") as f:
                    f.write(raw)
                self.assertSetError(frag)
        size = os.path.getsize(self.path("a.safetensors"))
        ent = {"name": "a.safetensors", "size": size}
        with open(m, "w") as f:
            json.dump({"files": [ent, ent]}, f)
        self.assertSetError("listed twice")
        with open(m, "w") as f:
            json.dump({"files": [ent], "bytes": size + 1}, f)
        self.assertSetError('"bytes" is')

    def test_not_safetensors(self):
        with open(self.path("a.safetensors"), "wb") as f:
            f.write(b"PK\x03\x04 this is a zip, not weights" * 10)
        manifest(self.dir, ["a.safetensors"])
        msg = self.assertSetError("not a safetensors file")
        self.assertIn("a.safetensors", msg)
        with open(self.path("a.safetensors"), "wb") as f:
            f.write(b"abc")
        manifest(self.dir, ["a.safetensors"])
        self.assertSetError("too short")
        head = b"[1, 2, 3]"
        with open(self.path("a.safetensors"), "wb") as f:
            f.write(struct.pack("<Q", len(head)) + head)
        manifest(self.dir, ["a.safetensors"])
        self.assertSetError("not a JSON object")
        head = b"{nope}  "
        with open(self.path("a.safetensors"), "wb") as f:
            f.write(struct.pack("<Q", len(head)) + head)
        manifest(self.dir, ["a.safetensors"])
        self.assertSetError("header is not JSON")

    def test_truncated_file(self):
        self.make()
        p = self.path("a.safetensors")
        size = os.path.getsize(p)
        os.truncate(p, size - 5)
        self.assertSetError("truncated or changed")  # the manifest's size catches it
        manifest(self.dir, ["a.safetensors", "b.safetensors"])  # a manifest written over a short file
        msg = self.assertSetError("past the end of the file")
        self.assertIn("truncated", msg)
        os.truncate(p, 20)
        manifest(self.dir, ["a.safetensors", "b.safetensors"])
        self.assertSetError("does not fit the file")

    def test_bad_entries(self):
        cases = [
            ([("x", "F12", (1,), b"\0" * 2)], "unknown dtype 'F12'"),
            ([("x", "F32", (-1,), b"\0" * 4)], "is not a list of sizes"),
            ([("x", "F32", (2,), b"\0" * 4)], "holds 4 bytes, F32[2] needs 8"),
        ]
        for ts, frag in cases:
            with self.subTest(frag=frag):
                st_file(self.path("a.safetensors"), ts)
                manifest(self.dir, ["a.safetensors"])
                self.assertSetError(frag)

    def test_overlap_misalignment_duplicates(self):
        head = {"x": {"dtype": "U8", "shape": [4], "data_offsets": [0, 4]},
                "y": {"dtype": "U8", "shape": [4], "data_offsets": [2, 6]}}
        raw = json.dumps(head).encode()
        raw += b" " * (-len(raw) % 8)
        with open(self.path("a.safetensors"), "wb") as f:
            f.write(struct.pack("<Q", len(raw)) + raw + bytes(8))
        manifest(self.dir, ["a.safetensors"])
        self.assertSetError("x and y overlap")
        st_file(self.path("a.safetensors"), [("o", "U8", (1,), b"\1"), ("f", "F32", (1,), bytes(4))])
        manifest(self.dir, ["a.safetensors"])
        self.assertSetError("not a multiple of its 4-byte F32 elements")
        st_file(self.path("a.safetensors"), [("x", "U8", (1,), b"\1")], pad=False)
        st_file(self.path("b.safetensors"), [("x", "U8", (1,), b"\2")])
        manifest(self.dir, ["a.safetensors", "b.safetensors"])
        self.assertSetError("tensor x is also in")

    def test_files_disagreeing_on_metadata(self):
        self.make()
        st_file(self.path("b.safetensors"), [("n", "I64", (2,), bytes(16)), ("e", "U8", (0,), b"")],
                {"rekindle.checksum": "other"})
        manifest(self.dir, ["a.safetensors", "b.safetensors"])
        ws = rw.open_set(self.dir)
        with self.assertRaisesRegex(rw.SetError, "disagree on metadata rekindle.checksum"):
            ws.meta("rekindle.checksum")


class MapTest(Base):
    def test_map_is_read_only_and_shows_the_bytes(self):
        ws = rw.open_set(self.make())
        self.assertIs(ws.map(), ws)
        self.assertIs(ws.map(), ws)  # once
        self.assertEqual(bytes(ws.buffer("w")), bf16([1, 2, 3, 4, 5, 6]))
        self.assertEqual(struct.unpack("<2q", ws.buffer("n")), (-7, 9))
        self.assertEqual(len(ws.buffer("e")), 0)
        buf = ws.buffer("b")
        self.assertTrue(buf.readonly)
        with self.assertRaises(TypeError):
            buf[0] = 1
        with self.assertRaisesRegex(rw.SetError, "no tensor nope"):
            ws.buffer("nope")
        del buf
        ws.close()

    def test_map_notices_a_file_changed_since_open(self):
        ws = rw.open_set(self.make())
        with open(self.path("b.safetensors"), "ab") as f:
            f.write(b"more")
        with self.assertRaisesRegex(rw.SetError, "changed size"):
            ws.map()

    def test_set_stays_readable_after_its_directory_entry_goes(self):
        # The service may evict (unlink) a set an engine maps: the engine's
        # mapping keeps the bytes until it exits.
        ws = rw.open_set(self.make()).map()
        os.unlink(self.path("a.safetensors"))
        self.assertEqual(bytes(ws.buffer("w")), bf16([1, 2, 3, 4, 5, 6]))


@unittest.skipIf(torch is None, NO_TORCH)
class TorchTest(Base):
    def test_tensors_are_views_with_header_dtypes(self):
        ws = rw.open_set(self.make())
        w = ws.tensor("w")
        self.assertEqual((w.dtype, tuple(w.shape)), (torch.bfloat16, (2, 3)))
        self.assertEqual(w.float().flatten().tolist(), [1, 2, 3, 4, 5, 6])
        self.assertEqual(ws.tensor("b").tolist(), [0.5, 1.5, 2.5, 3.5])
        self.assertEqual(ws.tensor("n").tolist(), [-7, 9])
        self.assertEqual(ws.tensor("e").numel(), 0)

    def test_copy_into_cpu_tensors(self):
        ws = rw.open_set(self.make())
        dst = {"w": torch.zeros(2, 3, dtype=torch.bfloat16), "b": torch.zeros(4), "n": torch.zeros(2, dtype=torch.long)}
        n, secs = ws.copy_into(dst, piece=4)  # pieces smaller than a tensor
        self.assertEqual(n, 12 + 16 + 16)
        self.assertGreaterEqual(secs, 0)
        self.assertEqual(dst["w"].float().flatten().tolist(), [1, 2, 3, 4, 5, 6])
        self.assertEqual(dst["n"].tolist(), [-7, 9])
        with self.assertRaisesRegex(rw.SetError, r"w is BF16\[2, 3\], the engine wants torch.float32\[2, 3\]"):
            ws.copy_into({"w": torch.zeros(2, 3)})
        with self.assertRaisesRegex(rw.SetError, "no tensor q"):
            ws.copy_into({"q": torch.zeros(1)})


@unittest.skipUnless(CUDA, NO_CUDA)
class CudaTest(Base):
    def test_register_once_and_copy_over_streams(self):
        n = 3 << 20
        data = bytes(range(256)) * (n // 256)
        self.make({"big.safetensors": [("x", "U8", (n,), data), ("y", "BF16", (3,), bf16([1, 2, 3]))]})
        ws = rw.open_set(self.dir)
        secs = ws.register()
        self.assertTrue(ws.registered)
        self.assertGreater(secs, 0)
        self.assertEqual(ws.register(), 0.0)  # idempotent
        dst = {"x": torch.empty(n, dtype=torch.uint8, device="cuda"),
               "y": torch.empty(3, dtype=torch.bfloat16, device="cuda")}
        got, _ = ws.copy_into(dst, streams=3, piece=1 << 20)
        self.assertEqual(got, n + 6)
        self.assertTrue(torch.equal(dst["x"].cpu(), ws.tensor("x")))
        self.assertEqual(dst["y"].float().tolist(), [1, 2, 3])
        ws.close()


if __name__ == "__main__":
    unittest.main()
