"""oci_tar: the one writer of OCI image layout archives for the bats tests.

An archive is what `nerdctl load` and `ctr images import` read: an
`oci-layout` file, an `index.json` naming the manifests, and every blob under
`blobs/sha256/<hex>`. The tests build one with Archive (add blobs, get their
descriptors, write the tar) or change one that `nerdctl save` wrote (read).
Run the tests' Python through helpers.bash's oci_python, which puts this folder
on the module path.
"""
import hashlib
import io
import json
import tarfile

LAYOUT = b'{"imageLayoutVersion":"1.0.0"}'
MANIFEST = "application/vnd.oci.image.manifest.v1+json"
CONFIG = "application/vnd.oci.image.config.v1+json"
LAYER = "application/vnd.oci.image.layer.v1.tar"


def _descriptor(media_type, digest, size):
    desc = {} if media_type is None else {"mediaType": media_type}
    desc.update(digest=digest, size=size)
    return desc


class Archive:
    """Blobs by digest, written out as one OCI image layout tar."""

    def __init__(self):
        self.blobs = {}  # "sha256:<hex>" -> bytes, or the path of a file

    def add(self, data, media_type=None):
        """Add the blob DATA (bytes); return its descriptor."""
        digest = "sha256:" + hashlib.sha256(data).hexdigest()
        self.blobs[digest] = data
        return _descriptor(media_type, digest, len(data))

    def add_json(self, obj, media_type=None):
        """Add OBJ as a JSON blob; return its descriptor."""
        return self.add(json.dumps(obj).encode(), media_type)

    def add_file(self, path, media_type=None):
        """Add the file at PATH as a blob without reading it into memory."""
        h, size = hashlib.sha256(), 0
        with open(path, "rb") as f:
            for chunk in iter(lambda: f.read(1 << 20), b""):
                h.update(chunk)
                size += len(chunk)
        digest = "sha256:" + h.hexdigest()
        self.blobs[digest] = path
        return _descriptor(media_type, digest, size)

    def get(self, digest):
        """The bytes of the blob DIGEST."""
        blob = self.blobs[digest]
        if isinstance(blob, bytes):
            return blob
        with open(blob, "rb") as f:
            return f.read()

    def get_json(self, digest):
        return json.loads(self.get(digest))

    def write(self, out, manifests):
        """Write the archive to OUT with an index.json of MANIFESTS (descriptors)."""
        index = {"schemaVersion": 2, "manifests": manifests}
        with tarfile.open(out, "w") as t:
            _add_bytes(t, "oci-layout", LAYOUT)
            _add_bytes(t, "index.json", json.dumps(index).encode())
            for digest, blob in self.blobs.items():
                name = "blobs/sha256/" + digest.split(":", 1)[1]
                if isinstance(blob, bytes):
                    _add_bytes(t, name, blob)
                else:
                    t.add(blob, name)


def _add_bytes(t, name, data):
    info = tarfile.TarInfo(name)
    info.size = len(data)
    t.addfile(info, io.BytesIO(data))


def read(path):
    """Read the archive at PATH: (its index.json, an Archive of its blobs)."""
    archive = Archive()
    with tarfile.open(path) as t:
        index = json.loads(t.extractfile("index.json").read())
        for m in t.getmembers():
            if m.isfile() and m.name.startswith("blobs/sha256/"):
                archive.blobs["sha256:" + m.name[len("blobs/sha256/"):]] = t.extractfile(m).read()
    return index, archive


def edit_layer(src, dst, name, edit, add=None):
    """Write the archive SRC again to DST, as image NAME, with the first
    layer of its first manifest rewritten: EDIT(member name, bytes) returns
    the bytes of each regular file, and ADD (member name: bytes) appends
    regular files. The config's diff ID follows the new layer, which keeps
    the old one's media type and annotations."""
    index, a = read(src)
    desc = index["manifests"][0]
    man = a.get_json(desc["digest"])
    old = man["layers"][0]
    inp = tarfile.open(fileobj=io.BytesIO(a.get(old["digest"])))
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as out:
        for m in inp.getmembers():
            data = None
            if m.isfile():
                data = edit(m.name, inp.extractfile(m).read())
                m.size = len(data)
            out.addfile(m, io.BytesIO(data) if data is not None else None)
        for n, data in (add or {}).items():
            m = tarfile.TarInfo(n)
            m.size, m.mode = len(data), 0o600
            out.addfile(m, io.BytesIO(data))
    new = a.add(buf.getvalue(), old.get("mediaType"))
    cfg = a.get_json(man["config"]["digest"])
    cfg["rootfs"]["diff_ids"] = [new["digest"] if d == old["digest"] else d for d in cfg["rootfs"]["diff_ids"]]
    new["annotations"] = old.get("annotations", {})
    man["layers"][0] = new
    man["config"] = a.add_json(cfg, man["config"]["mediaType"])
    desc.update(a.add_json(man))
    desc["annotations"] = image_name(name)
    a.write(dst, [desc])


def image_name(name, tag_annotation=True):
    """The index annotations that name an image NAME for containerd (and,
    with TAG_ANNOTATION, for other OCI tools: the tag as ref.name)."""
    ann = {"io.containerd.image.name": name}
    if tag_annotation:
        ann["org.opencontainers.image.ref.name"] = name.rsplit(":", 1)[-1]
    return ann
