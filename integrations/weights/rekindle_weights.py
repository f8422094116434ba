"""rekindle_weights: an engine's side of a Rekindle weight set.

A weight set NAME is a directory of safetensors files plus rekindle-set.json
(name, files [{name, size}], bytes, ...), which the rekindle-weights service
writes last: no manifest means the set is not loaded (yet). Inside a container
it is at /rekindle/weights/NAME, read-only.

    ws = open_set("/rekindle/weights/qwen")   # Unavailable / SetError say why
    ws.map()                                  # MAP_SHARED, PROT_READ, once
    ws.register()                             # cudaHostRegister, once; seconds
    nbytes, secs = ws.copy_into({name: gpu_tensor, ...}, streams=4)

Map and register once, before the engine's first checkpoint, and keep both:
the mapping is of a file on a bind mount, so CRIU leaves its bytes out of the
checkpoint and maps the same file again at restore, and the CUDA checkpoint
keeps the registration valid; unmapping or registering again on every resume
costs more than the copy itself. Parsing and mapping need only the standard
library; torch is imported when tensors are asked for.
"""

import ctypes
import json
import mmap
import os
import struct
import time

MANIFEST = "rekindle-set.json"
MAX_HEADER = 100 << 20          # safetensors' own limit
PIECE = 256 << 20               # bytes per copy: large, but several per big tensor
STREAMS = 4
REGISTER_READ_ONLY = 8          # cudaHostRegisterReadOnly
ATTR_READ_ONLY_REGISTER = 113   # CU_DEVICE_ATTRIBUTE_READ_ONLY_HOST_REGISTER_SUPPORTED

# safetensors dtype -> (torch dtype name, bytes per element)
DTYPES = {
    "BOOL": ("bool", 1), "U8": ("uint8", 1), "I8": ("int8", 1),
    "F8_E4M3": ("float8_e4m3fn", 1), "F8_E5M2": ("float8_e5m2", 1),
    "I16": ("int16", 2), "U16": ("uint16", 2), "F16": ("float16", 2), "BF16": ("bfloat16", 2),
    "I32": ("int32", 4), "U32": ("uint32", 4), "F32": ("float32", 4),
    "I64": ("int64", 8), "U64": ("uint64", 8), "F64": ("float64", 8),
}


class Unavailable(Exception):
    """The set is not there to use (absent, or not loaded yet): fall back."""


class SetError(Exception):
    """The set is there but unusable; the message names the file and the problem."""


class TensorInfo:
    __slots__ = ("name", "file", "dtype", "shape", "start", "nbytes")

    def __init__(self, name, file, dtype, shape, start, nbytes):
        self.name, self.file, self.dtype, self.shape = name, file, dtype, shape
        self.start, self.nbytes = start, nbytes  # start: offset in the file

    def __repr__(self):
        return f"TensorInfo({self.name!r}, {self.file!r}, {self.dtype}, {list(self.shape)}, @{self.start}+{self.nbytes})"


def _torch():
    import torch
    return torch


def _numel(shape):
    n = 1
    for s in shape:
        n *= s
    return n


def read_manifest(path):
    """The manifest of the set at path, checked against the files beside it."""
    if not os.path.isdir(path):
        raise Unavailable(f"weight set {path} does not exist: load it with the rekindle-weights "
                          f"service and give the container its device (rekindle.dev/weights=NAME)")
    mpath = os.path.join(path, MANIFEST)
    try:
        with open(mpath, "rb") as f:
            raw = f.read(16 << 20)
    except FileNotFoundError:
        raise Unavailable(f"weight set {path} is not loaded: no {MANIFEST} (the service writes it "
                          f"last; load the set, or wait for its load to finish)") from None
    except OSError as e:
        raise SetError(f"{mpath}: cannot read: {e.strerror}") from None
    try:
        man = json.loads(raw)
    except ValueError as e:
        raise SetError(f"{mpath}: not JSON ({e}): load the set again") from None
    files = man.get("files") if isinstance(man, dict) else None
    if not isinstance(files, list) or not files:
        raise SetError(f"{mpath}: no \"files\" list: load the set again")
    seen, total = set(), 0
    for ent in files:
        name = ent.get("name") if isinstance(ent, dict) else None
        size = ent.get("size") if isinstance(ent, dict) else None
        if not isinstance(name, str) or not isinstance(size, int) or isinstance(size, bool) or size < 0:
            raise SetError(f"{mpath}: file entry {ent!r} needs a \"name\" and a \"size\" in bytes")
        if name in ("", ".", "..", MANIFEST) or "/" in name or "\0" in name:
            raise SetError(f"{mpath}: file name {name!r} is not a plain file name in the set")
        if name in seen:
            raise SetError(f"{mpath}: {name} is listed twice")
        seen.add(name)
        try:
            st = os.stat(os.path.join(path, name))
        except OSError:
            raise SetError(f"{os.path.join(path, name)}: listed in {MANIFEST} but missing") from None
        if st.st_size != size:
            raise SetError(f"{os.path.join(path, name)}: {st.st_size} bytes, {MANIFEST} says {size}: "
                           f"truncated or changed after the load; load the set again")
        total += size
    if "bytes" in man and man["bytes"] != total:
        raise SetError(f"{mpath}: \"bytes\" is {man['bytes']}, its files add up to {total}")
    return man


def read_header(path):
    """(metadata, {name: TensorInfo}) of the safetensors file at path, every
    entry checked against the file's size."""
    try:
        with open(path, "rb") as f:
            size = os.fstat(f.fileno()).st_size
            if size < 8:
                raise SetError(f"{path}: {size} bytes: too short for a safetensors file")
            n = struct.unpack("<Q", f.read(8))[0]
            if n > MAX_HEADER or 8 + n > size:
                raise SetError(f"{path}: header length {n} does not fit the file ({size} bytes): "
                               f"not a safetensors file, or truncated")
            raw = f.read(n)
    except OSError as e:
        raise SetError(f"{path}: cannot read: {e.strerror}") from None
    try:
        head = json.loads(raw)
    except ValueError as e:
        raise SetError(f"{path}: header is not JSON ({e}): not a safetensors file") from None
    if not isinstance(head, dict):
        raise SetError(f"{path}: header is not a JSON object: not a safetensors file")
    meta = head.pop("__metadata__", None) or {}
    if not isinstance(meta, dict):
        raise SetError(f"{path}: __metadata__ is not an object")
    data, out, spans = 8 + n, {}, []
    for name, ent in head.items():
        if not isinstance(ent, dict):
            raise SetError(f"{path}: {name}: entry is not an object")
        dtype, shape, offs = ent.get("dtype"), ent.get("shape"), ent.get("data_offsets")
        if dtype not in DTYPES:
            raise SetError(f"{path}: {name}: unknown dtype {dtype!r}")
        if (not isinstance(shape, list) or
                not all(isinstance(s, int) and not isinstance(s, bool) and s >= 0 for s in shape)):
            raise SetError(f"{path}: {name}: shape {shape!r} is not a list of sizes")
        if (not isinstance(offs, list) or len(offs) != 2 or
                not all(isinstance(o, int) and not isinstance(o, bool) for o in offs) or not 0 <= offs[0] <= offs[1]):
            raise SetError(f"{path}: {name}: data_offsets {offs!r} is not [begin, end]")
        item = DTYPES[dtype][1]
        want = _numel(shape) * item
        if offs[1] - offs[0] != want:
            raise SetError(f"{path}: {name}: holds {offs[1] - offs[0]} bytes, {dtype}{shape} needs {want}")
        if data + offs[1] > size:
            raise SetError(f"{path}: {name} ends at byte {data + offs[1]}, past the end of the file "
                           f"({size} bytes): truncated")
        if (data + offs[0]) % item:
            raise SetError(f"{path}: {name} starts at byte {data + offs[0]}, not a multiple of its "
                           f"{item}-byte {dtype} elements: write the file with a padded header")
        out[name] = TensorInfo(name, path, dtype, tuple(shape), data + offs[0], want)
        spans.append((offs[0], offs[1], name))
    spans.sort()
    for (_, end, a), (begin, _, b) in zip(spans, spans[1:]):
        if begin < end:
            raise SetError(f"{path}: {a} and {b} overlap")
    return meta, out


class WeightSet:
    """A set opened by open_set(): manifest, tensors by name, and (after map()
    and register()) their bytes mapped read-only and pinned for the GPU."""

    def __init__(self, path):
        self.path = os.path.abspath(path)
        self.manifest = read_manifest(self.path)
        self.name = self.manifest.get("name") or os.path.basename(self.path)
        self.files = [e["name"] for e in self.manifest["files"]]
        self.bytes = sum(e["size"] for e in self.manifest["files"])
        self.metadata = {}   # file name -> its __metadata__
        self.tensors = {}    # tensor name -> TensorInfo (file: full path)
        for fn in self.files:
            full = os.path.join(self.path, fn)
            meta, table = read_header(full)
            self.metadata[fn] = meta
            for name, info in table.items():
                if name in self.tensors:
                    raise SetError(f"{full}: tensor {name} is also in {self.tensors[name].file}")
                self.tensors[name] = info
        self._maps = {}      # full path -> mmap
        self._fds = {}       # full path -> the mapped file, open
        self._bases = {}     # full path -> uint8 torch tensor over the mapping
        self.registered = False
        self.read_only_registration = None
        self.register_s = 0.0

    def __contains__(self, name):
        return name in self.tensors

    def __repr__(self):
        return f"WeightSet({self.path!r}, {len(self.tensors)} tensors, {self.bytes} bytes)"

    def meta(self, key):
        """The value of one metadata key, when every file that carries it agrees
        (None when none does); SetError when the files disagree."""
        vals = {m[key] for m in self.metadata.values() if key in m}
        if len(vals) > 1:
            raise SetError(f"{self.path}: files disagree on metadata {key}")
        return vals.pop() if vals else None

    def map(self):
        """Map every file MAP_SHARED, PROT_READ (once). The mapping is never
        undone while the engine runs."""
        for fn in self.files:
            full = os.path.join(self.path, fn)
            if full in self._maps:
                continue
            fd = os.open(full, os.O_RDONLY | os.O_CLOEXEC)
            try:
                if os.fstat(fd).st_size != self.manifest["files"][self.files.index(fn)]["size"]:
                    raise SetError(f"{full}: changed size since the set was opened: load the set again")
                self._maps[full] = mmap.mmap(fd, 0, flags=mmap.MAP_SHARED, prot=mmap.PROT_READ)
            except BaseException:
                os.close(fd)
                raise
            # Kept open beside the mapping: a restore reopens both from the
            # path, so fstat tells which file is mapped now (current()).
            self._fds[full] = fd
        return self

    def current(self):
        """Whether every mapped file is still the file at its path (not
        evicted, reloaded or replaced since it was mapped or restored)."""
        try:
            for full, fd in self._fds.items():
                a, b = os.fstat(fd), os.stat(full)
                if (a.st_dev, a.st_ino, a.st_size) != (b.st_dev, b.st_ino, b.st_size):
                    return False
            return os.path.isfile(os.path.join(self.path, MANIFEST))
        except OSError:
            return False

    def buffer(self, name):
        """Read-only memoryview of one tensor's bytes (maps the set if needed)."""
        info = self._info(name)
        self.map()
        return memoryview(self._maps[info.file])[info.start:info.start + info.nbytes]

    def _info(self, name):
        try:
            return self.tensors[name]
        except KeyError:
            raise SetError(f"{self.path}: no tensor {name}") from None

    def _base(self, full):
        base = self._bases.get(full)
        if base is None:
            import warnings
            torch = _torch()
            self.map()
            with warnings.catch_warnings():  # read-only buffer: we never write through it
                warnings.simplefilter("ignore", UserWarning)
                base = torch.frombuffer(self._maps[full], dtype=torch.uint8)
            self._bases[full] = base
        return base

    def tensor(self, name):
        """CPU torch tensor viewing the mapping (read-only: never write to it)."""
        torch = _torch()
        info = self._info(name)
        tname = DTYPES[info.dtype][0]
        dtype = getattr(torch, tname, None)
        if dtype is None:
            raise SetError(f"{info.file}: {name} is {info.dtype}, which this torch ({torch.__version__}) lacks")
        raw = self._base(info.file)[info.start:info.start + info.nbytes]
        return raw.view(dtype).view(info.shape)

    def register(self, device=None):
        """Pin every mapped file for DMA with cudaHostRegister, read-only where
        the device supports it. Once: a second call does nothing. Returns the
        seconds this call took."""
        if self.registered:
            return 0.0
        torch = _torch()
        t = time.perf_counter()
        dev = torch.device("cuda", torch.cuda.current_device()) if device is None else torch.device(device)
        flags = REGISTER_READ_ONLY if read_only_register_supported(dev.index or 0) else 0
        cudart = torch.cuda.cudart()
        page = mmap.PAGESIZE
        done = []
        try:
            with torch.cuda.device(dev):
                for fn in self.files:
                    full = os.path.join(self.path, fn)
                    base = self._base(full)
                    n = (base.numel() + page - 1) // page * page  # the mapping's whole pages
                    err = int(cudart.cudaHostRegister(base.data_ptr(), n, flags))
                    if err != 0:
                        raise SetError(f"{full}: cudaHostRegister({n} bytes, flags {flags}) failed with CUDA "
                                       f"error {err}: the mapping cannot be pinned (is the container's "
                                       f"memlock limit too low, or the file not on tmpfs/hugetlbfs?)")
                    done.append(base.data_ptr())
        except BaseException:
            for p in done:
                cudart.cudaHostUnregister(p)
            raise
        self.registered = True
        self.read_only_registration = flags == REGISTER_READ_ONLY
        self.register_s = time.perf_counter() - t
        return self.register_s

    def copy_into(self, dst, streams=STREAMS, piece=PIECE):
        """Copy the set's tensors into dst ({name: tensor}, same dtype and
        shape, contiguous): pieces of up to `piece` bytes spread over `streams`
        CUDA streams, non_blocking (at PCIe speed once register() has run).
        Waits for the copies; returns (bytes, seconds). CPU destinations are
        copied in place (tests)."""
        torch = _torch()
        jobs, total = [], 0
        for name, d in dst.items():
            info = self._info(name)
            src = self.tensor(name)
            if d.dtype != src.dtype or tuple(d.shape) != info.shape:
                raise SetError(f"{info.file}: {name} is {info.dtype}{list(info.shape)}, "
                               f"the engine wants {d.dtype}{list(d.shape)}")
            if not d.is_contiguous():
                raise SetError(f"{name}: destination tensor is not contiguous")
            if info.nbytes == 0:
                continue
            s8 = self._base(info.file)[info.start:info.start + info.nbytes]
            d8 = d.view(-1).view(torch.uint8)
            for a in range(0, info.nbytes, piece):
                jobs.append((d8[a:a + piece], s8[a:a + piece]))
            total += info.nbytes
        cuda = [d for d, _ in jobs if d.is_cuda]
        if not cuda:
            t = time.perf_counter()
            for d, s in jobs:
                d.copy_(s)
            return total, time.perf_counter() - t
        dev = cuda[0].device
        torch.cuda.synchronize(dev)  # time the copies alone
        t = time.perf_counter()
        ss = [torch.cuda.Stream(dev) for _ in range(max(1, streams))]
        load = [0] * len(ss)
        # Biggest first, each onto the least loaded stream: streams finish together.
        for d, s in sorted(jobs, key=lambda j: -j[1].numel()):
            i = load.index(min(load))
            with torch.cuda.stream(ss[i]):
                d.copy_(s, non_blocking=True)
            load[i] += s.numel()
        for s in ss:
            s.synchronize()
        return total, time.perf_counter() - t

    def close(self):
        """Unregister and unmap (tests, tools). An engine keeps its set for
        its whole life instead: see the module's doc."""
        if self.registered:
            cudart = _torch().cuda.cudart()
            for base in self._bases.values():
                cudart.cudaHostUnregister(base.data_ptr())
            self.registered = False
        self._bases.clear()
        for m in self._maps.values():
            try:
                m.close()
            except BufferError:  # a tensor view still holds it: unmapped when freed
                pass
        self._maps.clear()
        for fd in self._fds.values():
            os.close(fd)
        self._fds.clear()


def open_set(path):
    """WeightSet for the directory at path: manifest and every header checked.
    Raises Unavailable (absent, not loaded) or SetError (broken)."""
    return WeightSet(path)


def probe(path):
    """(WeightSet, None) when the set at path can be used, else (None, why)."""
    try:
        return open_set(path), None
    except (Unavailable, SetError) as e:
        return None, str(e)


def read_only_register_supported(ordinal=0):
    """Whether the driver can register read-only host memory on this GPU
    (asked from libcuda; False when it cannot be asked)."""
    try:
        cuda = ctypes.CDLL("libcuda.so.1")
        dev, val = ctypes.c_int(), ctypes.c_int()
        if cuda.cuDeviceGet(ctypes.byref(dev), ordinal) != 0:
            return False
        if cuda.cuDeviceGetAttribute(ctypes.byref(val), ATTR_READ_ONLY_REGISTER, dev) != 0:
            return False
        return val.value == 1
    except (OSError, AttributeError):
        return False
