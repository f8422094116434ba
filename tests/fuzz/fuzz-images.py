#!/usr/bin/env python3
"""Hostile-image fuzzer: restore real CRIU dumps after seeded random mutations.

A checkpoint image is hostile until proven otherwise (docs/security.md). This
takes real dumps of busybox containers (`runc checkpoint`, as 470's bundle and
dump make them), changes what CRIU and runc read from them, and restores each
with `runc restore` under a hard timeout, beside canaries that the mutations
aim at. The mutations are of three sorts:

- aimed ones, where earlier holes were: hostile names, sizes, counts, modes,
  tasks, namespaces, image files, the rootfs the names resolve in;
- content ones: any field of any entry of any image file runc's guard lets
  through (decoded with crit, the field picked by its protobuf message from
  CRIU's .proto files, set to a boundary or hostile value, encoded again),
  any of those files as raw bytes, and runc's own descriptors.json;
- cross-file references: an id, key or name in one image pointed at an
  object of another (an fd at a file of another kind, a task at another's
  core, a remap, lock, peer or mount at something else), and the two holes
  of issue 57 as kinds of their own: a pipe key in descriptors.json past
  the stdio that a file of the images takes (runc's RPC socket to CRIU went
  to the task), and a lease a non-root task could not take.

A case passes when the restore is refused with a named reason or restores
harmlessly: the canaries untouched, no restored task holding a canary, a
socket of the host's network namespace, a descriptor runc had CRIU inherit
past the stdio, or a lock the kernel would not have granted it; nothing
hangs and nothing is left behind. One line per case, then outcomes per
mutation kind and per kind of image file changed; exit 1 when any case
fails.

Reproduce a case with --seed SEED --cases 1 (its seed picks its mutation and
shape), or keep failing cases with --keep DIR and restore them again with
--replay DIR. Runs as root; needs busybox, crit and the built runc and criu
(and CRIU's .proto files, build/src/criu/images, for fields a dump left out).
"""

import argparse
import base64
import ctypes
import gzip
import hashlib
import io
import json
import os
import random
import re
import shutil
import signal
import struct
import socket
import stat
import subprocess
import sys
import tarfile
import tempfile
import threading
import time

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BIN = os.environ.get("REKINDLE_BIN", os.path.join(REPO, "build", "bin"))

# Enough "../" to climb from any folder CRIU resolves in to the host's root.
CLIMB = "../" * 24


class SetupError(Exception):
    """The fuzzer could not prepare its dumps or canaries: not a finding."""


def ghost_tail(path):
    """The bytes after a ghost-file image's one entry: the file's contents."""
    with open(path, "rb") as f:
        raw = f.read()
    size = struct.unpack_from("<I", raw, 8)[0]
    return raw[12 + size:]


def sh(*args, **kw):
    kw.setdefault("stdout", subprocess.PIPE)
    kw.setdefault("stderr", subprocess.STDOUT)
    kw.setdefault("stdin", subprocess.DEVNULL)
    kw.setdefault("text", True)
    return subprocess.run(list(args), **kw)


# ---- the runc and crit this run uses --------------------------------------

class Tools:
    def __init__(self, runc, crit, root, timeout):
        self.runc, self.crit, self.root, self.timeout = runc, crit, root, timeout
        self.schema = Schema(PROTOS)
        # runc finds criu on PATH: the built one first, as 470 runs it.
        self.env = dict(os.environ, PATH=os.path.dirname(runc) + ":" + BIN + ":" + os.environ.get("PATH", ""))

    def runc_cmd(self, *args):
        return [self.runc, "--root", self.root] + list(args)

    def r(self, *args, timeout=30):
        return sh(*self.runc_cmd(*args), env=self.env, timeout=timeout)

    def decode(self, path):
        p = sh(self.crit, "decode", "-i", path)
        if p.returncode != 0:
            raise SetupError("crit decode %s: %s" % (path, p.stdout.strip()))
        d = json.loads(p.stdout)
        if d.get("magic") == "GHOST_FILE" and len(d["entries"]) == 1 and "extra" in d["entries"][0]:
            # crit reads a ghost's contents in whole words: take them from
            # the file, or encoding would pad the ghost with zeros.
            d["entries"][0]["extra"] = base64.b64encode(ghost_tail(path)).decode()
        return d

    def encode(self, path, data):
        # crit takes an entry's trailing raw bytes (a ghost file's or a
        # pipe's contents) from an "extra" that is the entry's last key, in
        # JSON without spaces.
        for e in data.get("entries", []):
            if isinstance(e, dict) and "extra" in e:
                e["extra"] = e.pop("extra")
        tmp = path + ".json"
        with open(tmp, "w") as f:
            json.dump(data, f, separators=(",", ":"))
        p = sh(self.crit, "encode", "-i", tmp, "-o", path + ".new")
        os.unlink(tmp)
        if p.returncode != 0:
            if os.path.exists(path + ".new"):
                os.unlink(path + ".new")
            raise SetupError("crit encode %s: %s" % (path, p.stdout.strip()))
        os.rename(path + ".new", path)

    def running(self):
        p = self.r("list", "-q")
        return [n for n in p.stdout.split() if n] if p.returncode == 0 else []


# ---- shapes: the real dumps each case starts from --------------------------

# Each shape's process writes /tmp/ready once it holds what it should.
SHAPES = {
    # A plain loop, as 470 dumps.
    "loop": "touch /tmp/ready; while :; do sleep 1; done",
    # A FIFO, a pipe to a child, a bound unix socket (syslogd's /dev/log), a
    # TCP listener on a high port, a deleted file in /dev/shm held open (a
    # ghost file), a plain file held open, and child processes.
    "files": (
        "mkfifo /tmp/fifo; exec 3<>/tmp/fifo; "
        "echo data >/tmp/data; exec 6</tmp/data; "
        "exec 4<>/dev/shm/ghost; echo ghostly >&4; rm /dev/shm/ghost; "
        "syslogd -n -O /tmp/syslog & "
        "nc -l -p 40000 </dev/null >/dev/null & "
        "(while :; do sleep 1; done | cat >/dev/null) & "
        "sleep 0.5; touch /tmp/ready; while :; do sleep 1; done"
    ),
    # A host folder bound read-write at /vol, a file in it held open.
    "vol": "echo held >/vol/held; exec 5</vol/held; touch /tmp/ready; while :; do sleep 1; done",
}


def make_bundle(tools, dir, script, vol=None):
    rootfs = os.path.join(dir, "rootfs")
    for d in ("bin", "tmp"):
        os.makedirs(os.path.join(rootfs, d), exist_ok=True)
    busybox = shutil.which("busybox")
    if not busybox:
        raise SetupError("busybox is not installed")
    shutil.copy2(busybox, os.path.join(rootfs, "bin", "busybox"))
    os.symlink("busybox", os.path.join(rootfs, "bin", "sh"))
    p = sh(tools.runc, "spec", cwd=dir)
    if p.returncode != 0:
        raise SetupError("runc spec: " + p.stdout)
    cfg_path = os.path.join(dir, "config.json")
    with open(cfg_path) as f:
        cfg = json.load(f)
    cfg["process"]["terminal"] = False
    cfg["root"]["readonly"] = False
    cfg["process"]["args"] = ["/bin/sh", "-c", script]
    if vol:
        cfg["mounts"].append({"destination": "/vol", "type": "bind", "source": vol, "options": ["rbind", "rw"]})
    with open(cfg_path, "w") as f:
        json.dump(cfg, f, indent=1)


def dump_shape(tools, work, shape):
    dir = os.path.join(work, "shapes", shape)
    bundle = os.path.join(dir, "bundle")
    os.makedirs(bundle)
    vol = None
    if shape == "vol":
        vol = os.path.join(dir, "vol")
        os.makedirs(vol)
    make_bundle(tools, bundle, SHAPES[shape], vol)
    name = "fz-dump-%s-%d" % (shape, os.getpid())
    with open(os.devnull, "r+") as null:
        p = subprocess.run(tools.runc_cmd("run", "-d", name), cwd=bundle, env=tools.env,
                           stdin=null, stdout=null, stderr=null, timeout=60)
    if p.returncode != 0:
        raise SetupError("runc run of shape %s failed" % shape)
    ready = os.path.join(bundle, "rootfs", "tmp", "ready")
    for _ in range(100):
        if os.path.exists(ready):
            break
        time.sleep(0.1)
    else:
        tools.r("delete", "-f", name)
        raise SetupError("shape %s never became ready" % shape)
    time.sleep(0.3)
    os.unlink(ready)
    # --file-locks: containerd checkpoints and restores with it.
    p = tools.r("checkpoint", "--file-locks", "--image-path", os.path.join(dir, "img"),
                "--work-path", os.path.join(dir, "dump-work"), name, timeout=120)
    if p.returncode != 0:
        tools.r("delete", "-f", name)
        raise SetupError("runc checkpoint of shape %s: %s" % (shape, p.stdout.strip()))
    return dir


# ---- canaries ---------------------------------------------------------------

class Canaries:
    """What the mutations aim at: a 0700 folder holding a file that says
    "safe", a file outside any bundle, and a unix stream and datagram socket
    of the host's that nothing of a container may reach."""

    def __init__(self, dir):
        self.dir = dir
        self.victim = os.path.join(dir, "victim")
        self.file = os.path.join(self.victim, "canary")
        self.outside = os.path.join(dir, "outside")
        self.stream = os.path.join(dir, "host.sock")
        self.dgram = os.path.join(dir, "host-dgram.sock")
        self.hits = []
        self.lock = threading.Lock()
        self.socks = []

    def targets(self):
        """Host paths a mutation may aim a name at."""
        return [self.file, self.outside, os.path.join(self.victim, "pwned"),
                os.path.join(self.dir, "newdir"), self.stream, self.victim]

    def make(self):
        if os.path.lexists(self.dir):
            self.close()
            rmtree(self.dir)
        os.makedirs(self.victim)
        os.chmod(self.victim, 0o700)
        for f, mode in ((self.file, 0o600), (self.outside, 0o644)):
            with open(f, "w") as o:
                o.write("safe\n")
            os.chmod(f, mode)
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.bind(self.stream)
        s.listen(16)
        d = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        d.bind(self.dgram)
        self.socks = [s, d]
        with self.lock:
            self.hits = []
        self.ino = {os.fstat(x.fileno()).st_ino for x in self.socks}
        for x, fn in ((s, self._accept), (d, self._recv)):
            threading.Thread(target=fn, args=(x,), daemon=True).start()
        self.watch = Watch([self.dir, self.victim])
        self.snap = self.snapshot()

    def _accept(self, s):
        while True:
            try:
                c, _ = s.accept()
            except OSError:
                return
            if s not in self.socks:
                return
            with self.lock:
                self.hits.append("host stream socket %s took a connection" % self.stream)
            c.close()

    def _recv(self, d):
        while True:
            try:
                d.recv(65536)
            except OSError:
                return
            if d not in self.socks:
                return  # shut down by close(): recv returns at once
            with self.lock:
                self.hits.append("host datagram socket %s got a datagram" % self.dgram)

    def close(self):
        if getattr(self, "watch", None):
            self.watch.close()
            self.watch = None
        # Forget them first: shutdown wakes their threads, whose recv then
        # returns at once, and they must know it is not a peer's doing.
        socks, self.socks = self.socks, []
        for x in socks:
            try:
                x.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            x.close()

    def snapshot(self):
        """Every path under the canary folder: type, mode, owner, links,
        size and, for small regular files, a digest (never opening anything
        else: a FIFO put there would block)."""
        snap = {}
        for top, dirs, files in os.walk(self.dir):
            for n in dirs + files:
                p = os.path.join(top, n)
                st = os.lstat(p)
                digest = None
                if stat.S_ISREG(st.st_mode) and st.st_size < 1 << 20:
                    with open(p, "rb") as f:
                        digest = hashlib.sha256(f.read()).hexdigest()[:12]
                snap[p] = (stat.S_IFMT(st.st_mode), oct(stat.S_IMODE(st.st_mode)), st.st_uid,
                           st.st_gid, st.st_nlink, st.st_size, digest, st.st_ino)
        return snap

    def inodes(self):
        return {(os.lstat(p).st_dev, v[7]) for p, v in self.snap.items() if os.path.lexists(p)}

    def broken(self):
        """What changed since make(), as short sentences."""
        out = []
        with self.lock:
            out += self.hits
            self.hits = []
        seen = self.watch.events()
        now = self.snapshot()
        for p, v in self.snap.items():
            if p not in now:
                out.append("%s is gone" % p)
            elif now[p] != v:
                fields = ("type", "mode", "uid", "gid", "links", "size", "content", "inode")
                diff = [f for f, a, b in zip(fields, v, now[p]) if a != b]
                out.append("%s changed (%s)" % (p, ", ".join(diff)))
        out += ["%s was created" % p for p in now if p not in self.snap]
        if seen and not out:
            # Undone by the time the restore ended, but done.
            out.append("touched during the restore: " + "; ".join(dict.fromkeys(seen)))
        return out

    def quiet(self):
        """Forget events so far (this process's own, before a restore)."""
        self.watch.events()
        self.snap = self.snapshot()


class Watch:
    """inotify on the canary folders, to see what a restore did there and
    undid before it ended (a ghost file made and unlinked again)."""

    # IN_MODIFY IN_ATTRIB IN_CLOSE_WRITE IN_MOVED_FROM IN_MOVED_TO IN_CREATE
    # IN_DELETE IN_DELETE_SELF IN_MOVE_SELF
    MASK = 0x2 | 0x4 | 0x8 | 0x40 | 0x80 | 0x100 | 0x200 | 0x400 | 0x800
    NAMES = {0x2: "written", 0x4: "attributes changed", 0x8: "closed after writing", 0x40: "moved away",
             0x80: "moved in", 0x100: "created", 0x200: "deleted", 0x400: "deleted", 0x800: "moved"}

    def __init__(self, dirs):
        self.libc = ctypes.CDLL(None, use_errno=True)
        self.fd = self.libc.inotify_init1(os.O_NONBLOCK | os.O_CLOEXEC)
        if self.fd < 0:
            raise SetupError("inotify_init1: %s" % os.strerror(ctypes.get_errno()))
        self.wds = {}
        for d in dirs:
            wd = self.libc.inotify_add_watch(self.fd, d.encode(), self.MASK)
            if wd < 0:
                raise SetupError("inotify_add_watch %s: %s" % (d, os.strerror(ctypes.get_errno())))
            self.wds[wd] = d

    def events(self):
        out = []
        while True:
            try:
                buf = os.read(self.fd, 65536)
            except BlockingIOError:
                return out
            i = 0
            while i < len(buf):
                wd, mask, _, n = struct.unpack_from("iIII", buf, i)
                name = buf[i + 16:i + 16 + n].rstrip(b"\0").decode(errors="replace")
                i += 16 + n
                what = ", ".join(v for k, v in self.NAMES.items() if mask & k)
                if what:
                    out.append("%s %s" % (os.path.join(self.wds.get(wd, "?"), name), what))

    def close(self):
        os.close(self.fd)


def rmtree(path):
    """rm -rf that neither follows links nor blocks on FIFOs."""
    sh("rm", "-rf", "--one-file-system", path)


# ---- mutations --------------------------------------------------------------

class Case:
    """One case's copy of a shape: its images, bundle and canaries."""

    def __init__(self, tools, dir, canaries, rng):
        self.tools, self.dir, self.canaries, self.rng = tools, dir, canaries, rng
        self.img = os.path.join(dir, "img")
        self.bundle = os.path.join(dir, "bundle")
        self.rootfs = os.path.join(self.bundle, "rootfs")
        self.work = os.path.join(dir, "work")
        # The kinds of file the mutation changed, for the summary.
        self.touched = set()
        self.schema = tools.schema
        # Which round of the mutation kinds this case's seed is in.
        self.round = 0

    def path(self, name):
        return os.path.join(self.img, name)

    def touch(self, name):
        self.touched.add(file_kind(name))

    def load(self, name):
        return self.tools.decode(self.path(name))

    def save(self, name, d):
        self.tools.encode(self.path(name), d)
        self.touch(name)

    def images(self, prefix):
        return sorted(n for n in os.listdir(self.img) if n.startswith(prefix))

    def pipe_key(self):
        """A key as CRIU names a pipe, "pipe:[N]": a pipe of the images' if any."""
        ids = [e["pipe"]["pipe_id"] for e in self.load("files.img")["entries"] if e["type"] == "PIPE"]
        return "pipe:[%d]" % (self.rng.choice(ids) if ids else self.rng.randrange(1 << 20))

    def root_pid(self):
        return self.load("pstree.img")["entries"][0]["pid"]

    def fdinfo_name(self):
        ids = self.load("ids-%d.img" % self.root_pid())["entries"][0]
        return "fdinfo-%d.img" % ids["files_id"]

    def mnt_of(self, where):
        """The mount id of the mount at WHERE in the image."""
        m = self.load(self.images("mountpoints-")[0])["entries"]
        return next((e["mnt_id"] for e in m if e["mountpoint"] == where), m[-1]["mnt_id"])

    def hostile_name(self):
        """A name in the container that resolves, if resolved from the host
        side or by following links, to a canary: (name, mount point, host
        target, how)."""
        rng = self.rng
        target = rng.choice(self.canaries.targets())
        how = rng.choice(["dotdot", "absolute", "symlink", "relative-symlink", "dir-symlink", "vol-dotdot"])
        if how == "dotdot":
            return "/" + CLIMB + target.lstrip("/"), "/", target, how
        if how == "absolute":
            return target, "/", target, how
        if how == "vol-dotdot" and os.path.isdir(os.path.join(self.dir, "vol")):
            return "/vol/" + CLIMB + target.lstrip("/"), "/vol", target, how
        link = "l%d" % rng.randrange(1 << 20)
        if how == "dir-symlink":
            os.symlink(os.path.dirname(target), os.path.join(self.rootfs, link))
            return "/%s/%s" % (link, os.path.basename(target)), "/", target, how
        dest = target if how == "symlink" else CLIMB + target.lstrip("/")
        os.symlink(dest, os.path.join(self.rootfs, link))
        return "/" + link, "/", target, "symlink" if how == "vol-dotdot" else how

    def new_id(self, files):
        return max(e["id"] for e in files["entries"]) + 1 + self.rng.randrange(100)

    def new_reg(self, files, name, mnt):
        rng = self.rng
        fid = self.new_id(files)
        flags = rng.choice([0, 2, 0o1102, 0o2101, 0o100002])  # O_RDONLY, O_RDWR, +O_CREAT|O_TRUNC, +O_APPEND
        reg = {"id": fid, "flags": flags, "pos": "0",
               "fown": {"uid": 0, "euid": 0, "signum": 0, "pid_type": 0, "pid": 0},
               "name": name, "mnt_id": mnt, "mode": rng.choice([0o100644, 0o100600, 0o104755, 0o40755])}
        if rng.random() < 0.5:
            reg["size"] = str(rng.choice([0, 5, 1 << 40]))
        files["entries"].append({"type": "REG", "id": fid, "reg": reg})
        return fid


def file_kind(name):
    """An image file's kind, as runc's list names it: core-12.img is core-N.img."""
    return re.sub(r"[0-9]+", "N", os.path.basename(name))


def reg_entries(files, pred=lambda r: True):
    return [e for e in files["entries"] if e["type"] == "REG" and pred(e["reg"])]


def m_reg_name(c):
    """A file a task holds or maps gets a hostile name."""
    files = c.load("files.img")
    # A name, then one of its entries: /dev/null alone has a dozen.
    pick = c.rng.choice(sorted({e["reg"]["name"] for e in reg_entries(files, lambda r: r["name"] != "/")}))
    e = c.rng.choice(reg_entries(files, lambda r: r["name"] == pick))
    name, where, target, how = c.hostile_name()
    old = e["reg"]["name"]
    e["reg"]["name"], e["reg"]["mnt_id"] = name, c.mnt_of(where)
    if c.rng.random() < 0.5 and os.path.isfile(target):
        e["reg"]["size"] = str(os.path.getsize(target))
    if c.rng.random() < 0.3:
        e["reg"]["flags"] |= 0o1002  # O_RDWR|O_TRUNC
    c.save("files.img", files)
    return "%s -> %s (%s), flags %#o" % (old, name, how, e["reg"]["flags"])


def m_reg_unused(c):
    """File entries that no task uses, or one given a new descriptor."""
    files = c.load("files.img")
    n = c.rng.choice([1, 3, 10])
    names = []
    ids = []
    for _ in range(n):
        name, where, _, how = c.hostile_name()
        ids.append(c.new_reg(files, name, c.mnt_of(where)))
        names.append("%s (%s)" % (name, how))
    c.save("files.img", files)
    used = c.rng.random() < 0.5
    if used:
        fdi = c.load(c.fdinfo_name())
        fd = 40
        for i in ids:
            fdi["entries"].append({"id": i, "flags": 0, "type": "REG", "fd": fd})
            fd += 1
        c.save(c.fdinfo_name(), fdi)
    return "%d new file entries%s: %s" % (n, ", given fds 40+" if used else ", no fd", "; ".join(names[:3]))


def ghost_orig(c, files):
    remaps = c.load("remap-fpath.img")
    r = next(r for r in remaps["entries"] if r["remap_type"] == "GHOST")
    return r, next(e for e in files["entries"] if e["id"] == r["orig_id"])


def m_ghost_name(c):
    """The deleted file held open (a ghost) is made again under a hostile name."""
    files = c.load("files.img")
    _, e = ghost_orig(c, files)
    name, where, _, how = c.hostile_name()
    old = e["reg"]["name"]
    e["reg"]["name"], e["reg"]["mnt_id"] = name, c.mnt_of(where)
    c.save("files.img", files)
    return "ghost %s -> %s (%s)" % (old, name, how)


def m_ghost_fields(c):
    """A ghost file's size, mode, owner or device number."""
    files = c.load("files.img")
    r, _ = ghost_orig(c, files)
    img = "ghost-file-%d.img" % r["remap_id"]
    g = c.load(img)
    e = g["entries"][0]
    what = c.rng.choice(["size", "setuid", "chardev", "blockdev", "fifo", "dir", "owner", "symlink"])
    if what == "size":
        e["chunks"], e["size"] = True, str(c.rng.choice([1 << 40, (1 << 63) - 1, 1 << 32]))
    elif what == "setuid":
        e["mode"] = 0o104777
    elif what == "chardev":
        e["mode"], e["rdev"] = 0o20666, (1 << 8) | 1  # /dev/mem
    elif what == "blockdev":
        e["mode"], e["rdev"] = 0o60666, (8 << 8) | 0  # /dev/sda
    elif what == "fifo":
        e["mode"] = 0o10666
    elif what == "dir":
        e["mode"] = 0o40777
    elif what == "symlink":
        e["mode"] = 0o120777
        e["extra"] = base64.b64encode(c.canaries.file.encode()).decode()
    else:
        e["uid"], e["gid"] = c.rng.choice([(1000, 1000), (65534, 65534), (0, 0)])
        e["mode"] = 0o104755
    c.save(img, g)
    return "ghost-file %s: %s (mode %#o)" % (img, what, e["mode"])


def m_link_remap(c):
    """A file turned into a linked remap: CRIU links the remap's name to the
    file's and unlinks the remap after the restore."""
    files = c.load("files.img")
    e = c.rng.choice(reg_entries(files, lambda r: r["name"] not in ("/", "/dev/null")))
    name, where, _, how = c.hostile_name()
    rid = c.new_reg(files, name, c.mnt_of(where))
    swap = c.rng.random() < 0.3
    if swap:
        # Or the file's own name climbs out, the remap staying inside.
        rname = next(x for x in files["entries"] if x["id"] == rid)["reg"]
        rname["name"], e["reg"]["name"] = e["reg"]["name"], rname["name"]
        e["reg"]["mnt_id"], rname["mnt_id"] = rname["mnt_id"], e["reg"]["mnt_id"]
    c.save("files.img", files)
    remaps = {"magic": "REMAP_FPATH", "entries": []}
    if os.path.exists(c.path("remap-fpath.img")):
        remaps = c.load("remap-fpath.img")
    remaps["entries"].append({"orig_id": e["id"], "remap_id": rid, "remap_type": "LINKED"})
    c.save("remap-fpath.img", remaps)
    return "%s linked from remap %s (%s)%s" % (e["reg"]["name"], name, how, ", names swapped" if swap else "")


def m_fifo(c):
    """The FIFO's name, or its queued data's size."""
    files = c.load("files.img")
    f = next(e for e in files["entries"] if e["type"] == "FIFO")
    if c.rng.random() < 0.7:
        e = next(x for x in files["entries"] if x["id"] == f["fifo"]["regf_id"])
        name, where, _, how = c.hostile_name()
        e["reg"]["name"], e["reg"]["mnt_id"] = name, c.mnt_of(where)
        c.save("files.img", files)
        return "fifo /tmp/fifo -> %s (%s)" % (name, how)
    d = c.load("fifo-data.img")
    # pipe_data_entry's bytes is a uint32: the most it can claim.
    size = c.rng.choice([1 << 31, (1 << 32) - 1])
    if d["entries"]:
        d["entries"][0]["bytes"] = size
    else:
        d["entries"].append({"pipe_id": f["fifo"]["pipe_id"], "bytes": size, "size": 0})
    c.save("fifo-data.img", d)
    return "fifo-data: %d bytes queued" % size


def usk(files):
    return next(e for e in files["entries"] if e["type"] == "UNIXSK")


def sk_name(path):
    return base64.b64encode(path.encode() + b"\0").decode()


def m_unix_name(c):
    """The bound unix socket is bound at a hostile name, with its file's mode
    and owner changed."""
    files = c.load("files.img")
    u = usk(files)["usk"]
    name, where, _, how = c.hostile_name()
    name = name.replace(CLIMB, "../" * 12)  # a unix name fits in 108 bytes
    u["name"] = sk_name(name)
    u["mnt_id"] = c.mnt_of(where)
    perms = c.rng.choice([None, (0o140777, 0, 0), (0o140666, 1000, 1000)])
    if perms:
        u["file_perms"] = {"mode": perms[0], "uid": perms[1], "gid": perms[2]}
    c.save("files.img", files)
    return "/dev/log -> %s (%s)%s" % (name, how, ", perms %#o %d" % (perms[0], perms[1]) if perms else "")


def m_unix_peer(c):
    """The unix socket connected to an external peer named by a host path:
    the host's own sockets beside the canaries."""
    files = c.load("files.img")
    u = usk(files)["usk"]
    peer = dict(u)
    pid = c.new_id(files)
    host = c.rng.choice([c.canaries.stream, c.canaries.dgram])
    form = c.rng.choice(["absolute", "dotdot"])
    # A unix name fits in 108 bytes: climb less far.
    pname = host if form == "absolute" else "/" + "../" * 12 + host.lstrip("/")
    stream = host == c.canaries.stream
    peer.update(id=pid, ino=u["ino"] + 1000 + c.rng.randrange(1000), peer=0, state=10 if stream else 7,
                type=1 if stream else 2, uflags=1, name=sk_name(pname))  # uflags 1: USK_EXTERN
    peer.pop("file_perms", None)
    u["peer"], u["state"], u["type"] = peer["ino"], 1, peer["type"]  # 1: TCP_ESTABLISHED
    if c.rng.random() < 0.5:
        u["name"] = ""  # an unbound socket, as a client's is
    files["entries"].append({"type": "UNIXSK", "id": pid, "usk": peer})
    c.save("files.img", files)
    return "%s socket connected to external peer %s (%s)" % ("stream" if stream else "dgram", pname, form)


def m_inet(c):
    """The TCP listener's port, addresses or family."""
    files = c.load("files.img")
    e = next(x for x in files["entries"] if x["type"] == "INETSK")["isk"]
    what = c.rng.choice(["port", "addr", "established", "family"])
    if what == "port":
        e["src_port"] = c.rng.choice([0, 22, 80, 65535, 70000])
    elif what == "addr":
        e["src_addr"] = [c.rng.randrange(1 << 32) for _ in range(4)]
    elif what == "established":
        e["state"], e["dst_port"], e["dst_addr"] = 1, 22, [0, 0, 0xFFFF, 0x7F000001]
    else:
        e["family"] = c.rng.choice([2, 17, 1])
    c.save("files.img", files)
    return "inet socket %s -> port %s state %s family %s" % (what, e["src_port"], e["state"], e["family"])


NS_FIELDS = ["pid_ns_id", "net_ns_id", "ipc_ns_id", "uts_ns_id", "mnt_ns_id", "user_ns_id", "cgroup_ns_id", "time_ns_id"]


def m_extra_task(c):
    """A task added to the tree, a copy of the root task, in another
    namespace: the one CRIU itself runs in (the host's) or a new one."""
    tree = c.load("pstree.img")
    root = tree["entries"][0]["pid"]
    pid = max(max(e["threads"]) for e in tree["entries"]) + 10 + c.rng.randrange(50)
    tree["entries"].append({"pid": pid, "ppid": root, "pgid": root, "sid": root, "threads": [pid]})
    for prefix in ("core", "mm", "pagemap", "fs"):
        src = c.path("%s-%d.img" % (prefix, root))
        if os.path.exists(src):
            shutil.copyfile(src, c.path("%s-%d.img" % (prefix, pid)))
            c.touch(src)
    ids = c.load("ids-%d.img" % root)
    inv = c.load("inventory.img")["entries"][0]["root_ids"]
    where = c.rng.choice(["host", "new"])
    # The host's namespaces that the root task is not in (the others would
    # change nothing).
    cands = [f for f in NS_FIELDS if where == "new" or inv[f] != ids["entries"][0][f]]
    fields = c.rng.sample(cands, min(len(cands), c.rng.choice([1, 1, 2])))
    for f in fields:
        ids["entries"][0][f] = inv[f] if where == "host" else ids["entries"][0][f] + 1000
    c.save("ids-%d.img" % pid, ids)
    c.save("pstree.img", tree)
    return "task %d added in the %s %s" % (pid, where, "/".join(f[:-6] for f in fields))


def m_unknown_image(c):
    """Image files no dump writes: a copy of another under a new name, junk,
    an old-format image of a kind CRIU still reads."""
    rng = c.rng
    names = sorted(os.listdir(c.img))
    src = rng.choice([n for n in names if n.endswith(".img")])
    new = rng.choice(["foo-1.img", "core-%d.img" % rng.randrange(1000, 9999), "reg-files.img",
                      "netns-%d.img" % rng.randrange(1, 99), "fs-%d.img" % rng.randrange(1000, 9999),
                      "pages-%d.img" % rng.randrange(100, 999), "../escape.img"])
    c.touched.add("(new image file)")
    if new == "../escape.img" or rng.random() < 0.2:
        with open(c.path(os.path.basename(new)), "wb") as f:
            f.write(os.urandom(rng.randrange(1, 4096)))
        return "%s of random bytes" % os.path.basename(new)
    shutil.copyfile(c.path(src), c.path(new))
    return "%s, a copy of %s" % (new, src)


def m_tmpfs_tar(c):
    """A tmpfs's content, which CRIU extracts with tar: members through a
    link to a canary, climbing out, or device nodes."""
    rng = c.rng
    tars = c.images("tmpfs-")
    img = rng.choice(tars)
    with open(c.path(img), "rb") as f:
        raw = gzip.decompress(f.read())
    out = io.BytesIO()
    what = rng.choice(["symlink-then-file", "dotdot", "absolute", "hardlink", "device"])
    with tarfile.open(fileobj=io.BytesIO(raw)) as src, tarfile.open(fileobj=out, mode="w") as dst:
        for m in src.getmembers():
            dst.addfile(m, src.extractfile(m) if m.isfile() else None)

        def add(name, **kw):
            t = tarfile.TarInfo(name)
            data = kw.pop("data", None)
            for k, v in kw.items():
                setattr(t, k, v)
            if data is not None:
                t.size = len(data)
            dst.addfile(t, io.BytesIO(data) if data is not None else None)

        victim = c.canaries.victim
        if what == "symlink-then-file":
            add("./esc", type=tarfile.SYMTYPE, linkname=victim)
            add("./esc/pwned", data=b"pwned\n")
        elif what == "dotdot":
            add("./" + CLIMB + victim.lstrip("/") + "/pwned", data=b"pwned\n")
        elif what == "absolute":
            add(victim + "/pwned", data=b"pwned\n")
        elif what == "hardlink":
            add("./hl", type=tarfile.LNKTYPE, linkname=c.canaries.file)
        else:
            add("./mem", type=tarfile.CHRTYPE, devmajor=1, devminor=1, mode=0o666)
    with open(c.path(img), "wb") as f:
        f.write(gzip.compress(out.getvalue()))
    c.touch(img)
    return "%s: %s" % (img, what)


def m_oversized(c):
    """Sizes and counts far past what a dump writes."""
    rng = c.rng
    what = rng.choice(["reg-size", "many-files", "many-fds", "many-tasks", "pos"])
    files = c.load("files.img")
    if what in ("reg-size", "pos"):
        e = rng.choice(reg_entries(files, lambda r: r["name"] != "/"))
        key = "size" if what == "reg-size" else "pos"
        e["reg"][key] = str(rng.choice([1 << 40, (1 << 63) - 1, (1 << 64) - 1]))
        c.save("files.img", files)
        return "%s %s = %s" % (e["reg"]["name"], key, e["reg"][key])
    if what in ("many-files", "many-fds"):
        n = rng.choice([5000, 20000])
        base = max(x["id"] for x in files["entries"]) + 1
        tmpl = reg_entries(files, lambda r: r["name"] == "/dev/null")[0]["reg"]
        for i in range(n):
            files["entries"].append({"type": "REG", "id": base + i, "reg": dict(tmpl, id=base + i)})
        c.save("files.img", files)
        if what == "many-fds":
            fdi = c.load(c.fdinfo_name())
            fdi["entries"] += [{"id": base + i, "flags": 0, "type": "REG", "fd": 100 + i} for i in range(n)]
            c.save(c.fdinfo_name(), fdi)
        return "%d more /dev/null entries%s" % (n, " each with an fd" if what == "many-fds" else "")
    tree = c.load("pstree.img")
    root = tree["entries"][0]["pid"]
    n = rng.choice([200, 500])  # 1000 take 5 s to restore here: near the bats run's hang limit
    start = max(max(e["threads"]) for e in tree["entries"]) + 1
    for pid in range(start, start + n):
        tree["entries"].append({"pid": pid, "ppid": root, "pgid": root, "sid": root, "threads": [pid]})
        for prefix in ("core", "ids", "mm", "pagemap", "fs"):
            os.link(c.path("%s-%d.img" % (prefix, root)), c.path("%s-%d.img" % (prefix, pid)))
            c.touch("%s-%d.img" % (prefix, pid))
    c.save("pstree.img", tree)
    return "%d more tasks, copies of the root task" % n


def m_rootfs_swap(c):
    """A file that the images open, swapped in the rootfs for a FIFO, a
    symlink to a canary, a folder or a device node."""
    files = c.load("files.img")
    root_mnt = c.mnt_of("/")
    cands = sorted({e["reg"]["name"] for e in reg_entries(files, lambda r: r["mnt_id"] == root_mnt and r["name"] != "/")})
    name = c.rng.choice(cands)
    p = os.path.join(c.rootfs, name.lstrip("/"))
    what = c.rng.choice(["fifo", "fifo", "symlink", "dir", "chardev"])
    c.touched.add("(rootfs)")
    os.unlink(p)
    if what == "fifo":
        os.mkfifo(p)
    elif what == "symlink":
        os.symlink(c.canaries.file, p)
    elif what == "dir":
        os.mkdir(p)
    else:
        os.mknod(p, 0o20666, os.makedev(1, 1))
    return "%s in the rootfs is now a %s" % (name, what)


def m_creds(c):
    """uid, gid and mode fields: a task's credentials, a file's owner or mode."""
    rng = c.rng
    what = rng.choice(["task-uid", "task-caps", "fown", "reg-mode"])
    if what in ("task-uid", "task-caps"):
        tree = c.load("pstree.img")
        pid = rng.choice(tree["entries"])["pid"]
        img = "core-%d.img" % pid
        core = c.load(img)
        cr = core["entries"][0]["thread_core"]["creds"]
        if what == "task-uid":
            v = rng.choice([1000, 65534, 4294967295])
            for k in rng.sample(["uid", "euid", "suid", "fsuid", "gid", "egid", "sgid", "fsgid"], 3):
                cr[k] = v
            desc = "task %d ids %d" % (pid, v)
        else:
            cr["cap_inh"] = cr["cap_prm"] = cr["cap_eff"] = cr["cap_bnd"] = [4294967295, 511]
            desc = "task %d all capabilities" % pid
        c.save(img, core)
        return desc
    files = c.load("files.img")
    e = rng.choice(reg_entries(files))["reg"]
    if what == "fown":
        e["fown"].update(uid=rng.choice([1000, 65534]), euid=0, signum=9, pid_type=1, pid=1)
    else:
        e["mode"] = rng.choice([0o104777, 0o20666, 0o10644, 0o140777])
    c.save("files.img", files)
    return "%s: %s %s" % (e["name"], what, oct(e["mode"]) if what == "reg-mode" else "uid %d" % e["fown"]["uid"])


def m_mountpoint(c):
    """Mount points and mount roots."""
    rng = c.rng
    img = c.images("mountpoints-")[0]
    m = c.load(img)
    what = rng.choice(["dotdot", "host-path", "root-canary", "bind-canary"])
    ents = m["entries"]
    if what == "bind-canary":
        rootm = next(e for e in ents if e["mountpoint"] == "/")
        extra = dict(rootm, mnt_id=999, parent_mnt_id=rootm["mnt_id"], mountpoint="/mnt", root=c.canaries.victim)
        extra.pop("ext_key", None)
        ents.append(extra)
        desc = "a bind of %s at /mnt" % c.canaries.victim
    elif what == "root-canary":
        rootm = next(e for e in ents if e["mountpoint"] == "/")
        rootm["root"] = c.canaries.dir
        desc = "the root mount's root is %s" % c.canaries.dir
    else:
        e = rng.choice([e for e in ents if e["mountpoint"] != "/"])
        old = e["mountpoint"]
        e["mountpoint"] = ("/" + CLIMB + c.canaries.victim.lstrip("/")) if what == "dotdot" else c.canaries.victim
        desc = "mount at %s moved to %s" % (old, e["mountpoint"])
    c.save(img, m)
    return desc


# ---- content mutations: any field of any image file runc lets through -------
#
# The mutations above aim where earlier holes were. These change what they
# do not: any field of any entry of any image file runc's guard allows (its
# imageFiles table: guard/check/images.go, before that the runc series'
# *refuse-image-files-and-file-kinds* patch; --list names those that only
# raw-bytes changes). An image is decoded with crit, an entry and a field are
# picked by the entry's protobuf message (read from CRIU's .proto files, so
# a field the dump left out can be set too), a boundary or hostile value is
# put there and the image encoded again; a value crit cannot encode (out of
# the field's range) gives way to the next.

PROTOS = os.environ.get("REKINDLE_CRIU_PROTOS", os.path.join(REPO, "build", "src", "criu", "images"))

# crit's magic -> the message of its entries (and of those after the first).
MAGIC_MSG = {
    "INVENTORY": "inventory_entry", "PSTREE": "pstree_entry", "CORE": "core_entry",
    "IDS": "task_kobj_ids_entry", "FILES": "file_entry", "FDINFO": "fdinfo_entry", "FS": "fs_entry",
    "MM": "mm_entry", "PAGEMAP": ("pagemap_head", "pagemap_entry"), "MEMFD_INODE": "memfd_inode_entry",
    "SIGNAL": "siginfo_entry", "MNTS": "mnt_entry", "CGROUP": "cgroup_entry", "SECCOMP": "seccomp_entry",
    "APPARMOR": "apparmor_entry", "REMAP_FPATH": "remap_file_path_entry",
    "GHOST_FILE": ("ghost_file_entry", "ghost_chunk_entry"), "PIPES_DATA": "pipe_data_entry",
    "FIFO_DATA": "pipe_data_entry", "SK_QUEUES": "sk_packet_entry", "TCP_STREAM": "tcp_stream_entry",
    "TTY_INFO": "tty_info_entry", "TTY_DATA": "tty_data_entry", "FILE_LOCKS": "file_lock_entry",
    "BPFMAP_DATA": "bpfmap_data_entry", "UTSNS": "utsns_entry", "IPC_VAR": "ipc_var_entry",
    "IPCNS_SHM": "ipc_shm_entry", "IPCNS_MSG": "ipc_msg_entry", "IPCNS_SEM": "ipc_sem_entry",
    "TIMENS": "timens_entry", "PIDNS": "pidns_entry", "NETNS": "netns_entry", "STATS": "stats_entry",
}

# The image files of runc's list, by what the field kinds change. Those
# not here are raw bytes (pages, tmpfs archives, the ip and netfilter
# dumps), runc's descriptors.json and logs: raw-bytes and descriptors take
# them.
FIELD_IMAGES = {
    "field-task": ["pstree.img", "core-N.img", "ids-N.img", "fs-N.img", "mm-N.img", "pagemap-N.img",
                   "fdinfo-N.img", "signal-p-N.img", "signal-s-N.img"],
    "field-files": ["files.img", "remap-fpath.img", "ghost-file-N.img", "fifo-data.img", "pipes-data.img",
                    "sk-queues.img", "tcp-stream-N.img", "filelocks.img", "tty-info.img", "tty-data.img",
                    "memfd.img", "bpfmap-data.img"],
    "field-ns": ["inventory.img", "mountpoints-N.img", "cgroup.img", "seccomp.img", "apparmor.img",
                 "utsns-N.img", "ipcns-var-N.img", "ipcns-shm-N.img", "ipcns-msg-N.img", "ipcns-sem-N.img",
                 "timens-N.img", "pidns-N.img", "netns-N.img", "pagemap-shmem-N.img", "stats-dump"],
}

# Each protobuf integer type's range.
INT_TYPES = {t: r for names, r in (
    (("int32", "sint32", "sfixed32"), (-1 << 31, (1 << 31) - 1)), (("uint32", "fixed32"), (0, (1 << 32) - 1)),
    (("int64", "sint64", "sfixed64"), (-1 << 63, (1 << 63) - 1)), (("uint64", "fixed64"), (0, (1 << 64) - 1)),
) for t in names}
# crit writes 64-bit integers as JSON strings, as protojson does.
WIDE = {"int64", "sint64", "sfixed64", "uint64", "fixed64"}

DROP = object()  # a field's value that removes it


class Schema:
    """The messages and enums of CRIU's .proto files: each message's fields
    as (label, type, name), each enum's value names."""

    TOKENS = re.compile(r"\b(message|enum|extend|oneof)\s+([\w.]+)\s*\{|(\})|"
                        r"\b(optional|required|repeated)\s+([\w.]+)\s+(\w+)\s*=\s*\d+|\b(\w+)\s*=\s*-?\d+\s*[;\[]")

    def __init__(self, dir):
        self.msgs, self.enums = {}, {}
        if os.path.isdir(dir):
            for n in sorted(os.listdir(dir)):
                if n.endswith(".proto"):
                    with open(os.path.join(dir, n)) as f:
                        self.parse(f.read())

    def parse(self, text):
        text = re.sub(r"//[^\n]*|/\*.*?\*/", "", text, flags=re.S)
        stack = []
        for m in self.TOKENS.finditer(text):
            if m.group(1):
                stack.append((m.group(1), m.group(2)))
                if m.group(1) == "message":
                    self.msgs.setdefault(m.group(2), [])
                elif m.group(1) == "enum":
                    self.enums.setdefault(m.group(2), [])
            elif m.group(3):
                if stack:
                    stack.pop()
            elif m.group(4) and stack and stack[-1][0] == "message":
                self.msgs[stack[-1][1]].append((m.group(4), m.group(5).split(".")[-1], m.group(6)))
            elif m.group(7) and stack and stack[-1][0] == "enum":
                self.enums[stack[-1][1]].append(m.group(7))

    def fields(self, msg, obj=None):
        """MSG's fields; for a message not in the schema, those the dump
        wrote, typed by their JSON."""
        if msg in self.msgs:
            return self.msgs[msg]
        return [(("repeated" if isinstance(v, list) else "optional"), json_type(v), k)
                for k, v in (obj or {}).items() if k != "extra"]

    def zero(self, typ, depth=0):
        """A value of TYPE that encodes: zero, or a message of its required fields."""
        if typ in INT_TYPES:
            return "0" if typ in WIDE else 0
        if typ in self.enums and self.enums[typ]:
            return self.enums[typ][0]
        if typ in self.msgs and depth < 8:
            return {n: self.zero(t, depth + 1) for l, t, n in self.msgs[typ] if l == "required"}
        return {"bool": False, "string": "", "bytes": ""}.get(typ, 0)


def json_type(v):
    """A field's type as far as its JSON tells (no schema for its message)."""
    if isinstance(v, list):
        return json_type(v[0]) if v else "uint32"
    if isinstance(v, bool):
        return "bool"
    if isinstance(v, int):
        return "int32" if v < 0 else "uint32"
    if isinstance(v, str):
        return ("int64" if v.startswith("-") else "uint64") if re.fullmatch(r"-?[0-9]+", v) else "string"
    return "message?"


def entry_message(magic, i):
    m = MAGIC_MSG.get(magic)
    if isinstance(m, tuple):
        return m[0] if i == 0 else m[1]
    return m


def short(v):
    t = json.dumps(v)
    return t if len(t) <= 40 else "%s... (%d chars)" % (t[:28], len(t))


def int_values(typ, cur):
    """Boundary values of an integer field, and its value's neighbours; -1
    of an unsigned field is its largest value, as C reads it back."""
    lo, hi = INT_TYPES[typ]
    out = []
    for v in (0, -1, (1 << 31) - 1, (1 << 32) - 1, (1 << 63) - 1, cur - 1, cur + 1):
        if v < lo:
            v += hi + 1
        if lo <= v <= hi and v != cur and v not in out:
            out.append(v)
    return [(str(v) if typ in WIDE else v, str(v)) for v in out]


def string_values(c, cur):
    """Names CRIU or runc may resolve, join or use as a key."""
    target = c.rng.choice(c.canaries.targets())
    key = c.pipe_key()
    cur = cur or ""
    return [("..", '".."'), ("/" + CLIMB + target.lstrip("/"), "'..' up to " + target), (target, target),
            ("/" + key, '"/%s", a pipe key' % key), (key, '"%s"' % key), (cur + "/../..", "its value + /../.."),
            ("", "empty"), ("A" * 4097, "4097 chars, past PATH_MAX"), ("/" + "a/" * 40000, "80001 chars"),
            (cur + "\0/../../x", "a NUL, then ..")]


def bytes_values(c):
    path = ("/" + "../" * 12 + c.canaries.stream.lstrip("/")).encode()
    return [(base64.b64encode(b).decode(), w) for b, w in (
        (b"", "empty"), (path + b"\0", "a host socket's path through .."), (b"\0" * 4096, "4096 zero bytes"),
        (os.urandom(64), "64 random bytes"), (b"\xff" * 65536, "65536 0xff bytes"))]


def scalar_values(c, typ, cur):
    """(value, words) to try in a field of TYPE whose value is CUR (None: unset)."""
    s = c.schema
    if typ in INT_TYPES:
        return int_values(typ, int(cur) if cur is not None else 0)
    if typ == "bool":
        return [(not cur, "flipped to %s" % (not cur))]
    if typ == "string":
        return string_values(c, cur)
    if typ == "bytes":
        return bytes_values(c)
    if typ in ("float", "double"):
        return [(0.0, "0"), (-1.0, "-1"), (1e308, "1e308")]
    if typ in s.enums:
        return [(n, n) for n in s.enums[typ] if n != cur] + [(1000, "1000, no value of %s" % typ)]
    if typ in s.msgs:
        return [(s.zero(typ), "a %s of zero values" % typ), ({}, "an empty %s" % typ)]
    return [({}, "an empty message")]


def field_values(c, field, cur):
    """(value, words) to try in FIELD: its type's values; a repeated one
    emptied, duplicated, grown or one element changed; an optional one
    dropped."""
    label, typ, name = field
    if label != "repeated":
        out = scalar_values(c, typ, cur)
        if cur is not None and label == "optional":
            out.append((DROP, "dropped"))
        return out
    cur = cur or []
    out = [([], "emptied")]
    if not cur:
        return out + [([v], "one element, " + w) for v, w in scalar_values(c, typ, None)]
    i = c.rng.randrange(len(cur))
    out += [(cur + cur[i:i + 1], "element %d twice" % i), (cur * 2, "every element twice"),
            (cur[i:i + 1] * 1000, "1000 copies of element %d" % i), (cur[:i] + cur[i + 1:], "element %d removed" % i),
            (cur[:i] + [copy_json(cur[(i + 1) % len(cur)])] + cur[i + 1:], "element %d a copy of the next" % i)]
    out += [(cur[:i] + [v] + cur[i + 1:], "element %d %s" % (i, w)) for v, w in scalar_values(c, typ, cur[i])]
    return out


def copy_json(v):
    return json.loads(json.dumps(v))


def pick_field(c, msg, obj, path):
    """Walk down from OBJ, a decoded MSG, to one field: (its holder, the
    field, its path). A field the dump wrote is likelier than one it left
    out; a message field is often walked into."""
    rng = c.rng
    while True:
        fields = c.schema.fields(msg, obj)
        if not fields:
            raise SetupError("%s has no fields to change" % msg)
        present = [f for f in fields if f[2] in obj]
        absent = [f for f in fields if f[2] not in obj]
        pool = present if present and (not absent or rng.random() < 0.75) else absent
        label, typ, name = rng.choice(pool)
        val = obj.get(name)
        if label == "repeated" and val:
            i = rng.randrange(len(val))
            inner, where = val[i], "%s.%s[%d]" % (path, name, i)
        else:
            inner, where = val, "%s.%s" % (path, name)
        if isinstance(inner, dict) and inner and rng.random() < 0.7:
            obj, msg, path = inner, typ, where
            continue
        return obj, (label, typ, name), "%s.%s" % (path, name)


def try_values(c, img, doc, holder, name, values, limit=6):
    """Put VALUES in HOLDER[NAME] one after another until crit encodes
    DOC; returns the words of the one that did."""
    old = holder.get(name, DROP)
    values = list(values)
    c.rng.shuffle(values)
    errors = []
    for v, words in values[:limit]:
        if v is DROP:
            holder.pop(name, None)
        else:
            holder[name] = copy_json(v)
        try:
            c.save(img, doc)
            return words
        except SetupError as e:
            errors.append(str(e)[-80:])
        if old is DROP:
            holder.pop(name, None)
        else:
            holder[name] = old
    raise SetupError("no value encodes: " + "; ".join(errors[:2]))


def pick_image(c, kinds):
    """One image file of the case among KINDS (as runc's list names them):
    the kinds in turn from one round of seeds to the next, so a fixed-seed
    run covers them, then one file of the kind at random."""
    present = {}
    for n in sorted(os.listdir(c.img)):
        present.setdefault(file_kind(n), []).append(n)
    have = [k for k in kinds if k in present]
    if not have:
        raise SetupError("no image of %s" % ", ".join(kinds[:3]))
    return c.rng.choice(present[have[c.round % len(have)]])


def mutate_fields(c, group):
    img = pick_image(c, FIELD_IMAGES[group])
    doc = c.load(img)
    ents = doc["entries"]
    msg = entry_message(doc["magic"], 0)
    if not ents or c.rng.random() < 0.12:
        # The entries themselves: emptied, one twice, one removed...
        words = try_values(c, img, doc, doc, "entries", field_values(c, ("repeated", msg, "entries"), ents))
        return "%s: entries %s" % (img, words)
    i = c.rng.randrange(len(ents))
    holder, field, path = pick_field(c, entry_message(doc["magic"], i), ents[i], "")
    old = holder.get(field[2])
    words = try_values(c, img, doc, holder, field[2], field_values(c, field, old))
    return "%s entry %d%s (%s %s): %s -> %s" % (img, i, path, field[0], field[1], short(old) if old is not None else "unset", words)


def m_field_task(c):
    """Any field of a task's images: pstree, core, ids, fs, mm, pagemap, fdinfo, signals."""
    return mutate_fields(c, "field-task")


def m_field_files(c):
    """Any field of the file images: files.img, remaps, ghosts, pipe and FIFO data, queues, locks, ttys."""
    return mutate_fields(c, "field-files")


def m_field_ns(c):
    """Any field of the namespace images: inventory, mounts, cgroups, seccomp, UTS, IPC, time, pid, net."""
    return mutate_fields(c, "field-ns")


def m_raw_bytes(c):
    """Any image file of runc's list as bytes: truncated, bytes flipped, junk
    appended, an entry's size field lying; for the raw ones (pages, archives,
    ip dumps) the only mutation there is."""
    rng = c.rng
    names = [n for n in sorted(os.listdir(c.img)) if n not in ("descriptors.json",)]
    n = rng.choice(names)
    p = c.path(n)
    with open(p, "rb") as f:
        raw = bytearray(f.read())
    what = rng.choice(["truncated", "flipped", "appended", "entry-size", "emptied"])
    if what == "truncated" and raw:
        cut = rng.randrange(len(raw))
        raw = raw[:cut]
        what = "truncated to %d of its bytes" % cut
    elif what == "flipped" and raw:
        at = sorted(rng.randrange(len(raw)) for _ in range(rng.choice([1, 4, 32])))
        for i in at:
            raw[i] ^= 1 << rng.randrange(8)
        what = "%d bits flipped (at %s)" % (len(at), ",".join(map(str, at[:4])))
    elif what == "entry-size" and len(raw) >= 12:
        # A protobuf image's first entry size follows its 8 magic bytes
        # (4 for inventory.img).
        off = 4 if n == "inventory.img" else 8
        v = rng.choice([0, 0xFFFFFFFF, 0x7FFFFFFF, struct.unpack_from("<I", raw, off)[0] + 1])
        struct.pack_into("<I", raw, off, v)
        what = "first entry's size %#x" % v
    elif what == "emptied":
        raw = bytearray()
    else:
        raw += os.urandom(rng.choice([1, 13, 4096]))
        what = "random bytes appended"
    with open(p, "wb") as f:
        f.write(raw)
    c.touch(n)
    return "%s %s" % (n, what)


# ---- runc's own JSON ---------------------------------------------------------

def read_descriptors(c):
    with open(c.path("descriptors.json")) as f:
        return json.load(f)


def write_descriptors(c, doc=None, raw=None):
    with open(c.path("descriptors.json"), "wb") as f:
        f.write(raw if raw is not None else json.dumps(doc).encode())
    c.touch("descriptors.json")


def at_index(fds, i, key):
    """FDS with KEY at index I, "/dev/null" filling the gap."""
    fds = list(fds) + ["/dev/null"] * max(0, i - len(fds))
    return fds[:i] + [key] + fds[i + 1:]


def m_descriptors(c):
    """runc's descriptors.json, the only JSON of the images runc reads (its
    list of the task's stdio; each entry with "pipe:" makes runc hand CRIU
    its own descriptor of that index under that key): the document's or an
    entry's type changed, entries added, shifted or dropped, pipe keys past
    the three stdio ones, keys that only contain "pipe:", very long ones, not
    JSON."""
    rng = c.rng
    fds = read_descriptors(c)
    key = c.pipe_key()
    what = rng.choice(["doc-type", "entry-type", "appended", "shifted", "pipe-past-stdio", "pipe-substring",
                       "long", "not-json"])
    if what == "not-json":
        raw = rng.choice([b"", b"[", b"\xff\xfe\x00", b'["/dev/null",', b"null", json.dumps(fds).encode() * 2])
        write_descriptors(c, raw=raw)
        return "descriptors.json is %r" % raw[:24]
    if what == "doc-type":
        doc = rng.choice([{"0": key, "3": key}, key, 3, True, [fds], {}])
        words = "the document is %s" % short(doc)
    elif what == "entry-type":
        doc = list(fds)
        i = rng.randrange(len(doc))
        doc[i] = rng.choice([3, None, [key], {"key": key}, False, 1.5])
        words = "entry %d is %s" % (i, short(doc[i]))
    elif what == "appended":
        n = rng.choice([1, 2, 100, 70000])
        doc = fds + ["/dev/null"] * n
        words = "%d more entries" % n
    elif what == "shifted":
        i = rng.randrange(4)
        doc = [[key] + fds, fds[1:], fds[1:] + fds[:1], fds[:1] + [key] + fds[1:]][i]
        words = ["%s inserted first", "first entry dropped", "rotated by one", "%s inserted at 1"][i].replace("%s", key)
    elif what == "pipe-past-stdio":
        i = rng.choice([3, 3, 4, 5, 16, 1023])
        doc = at_index(fds, i, key)
        words = "%s at index %d, no file of that name" % (key, i)
    elif what == "pipe-substring":
        i = rng.choice([0, 1, 3])
        k = rng.choice(["/tmp/pipe:x", "socket:[1]pipe:", "pipe:[" + "9" * 30 + "]", "pipe:[-1]", "pipe:",
                        "anon_inode:pipe:[1]"])
        doc = at_index(fds, i, k)
        words = "%r at index %d" % (k, i)
    else:
        i = rng.choice([0, 3])
        doc = at_index(fds, i, "pipe:[" + "1" * (1 << 20) + "]")
        words = "a 1 MiB pipe key at index %d" % i
    write_descriptors(c, doc)
    return "descriptors.json: " + words


# ---- references from one file into another ----------------------------------

def task_pids(c):
    return [e["pid"] for e in c.load("pstree.img")["entries"]]


def fdinfo_of(c, pid):
    return "fdinfo-%d.img" % c.load("ids-%d.img" % pid)["entries"][0]["files_id"]


def files_by_id(files):
    return {e["id"]: e for e in files["entries"]}


def describe_file(e):
    if e["type"] == "REG":
        return "REG %s" % e["reg"]["name"]
    return "%s %d" % (e["type"], e["id"])


def x_fdinfo_kind(c):
    """A task's fd names a files.img entry of another kind (its type left, or made to match)."""
    files = c.load("files.img")
    pid = c.rng.choice(task_pids(c))
    name = fdinfo_of(c, pid)
    fdi = c.load(name)
    e = c.rng.choice(fdi["entries"])
    o = c.rng.choice([x for x in files["entries"] if x["type"] != e["type"]])
    e["id"] = o["id"]
    same = c.rng.random() < 0.5
    if same:
        e["type"] = o["type"]
    c.save(name, fdi)
    return "%s fd %d -> file %d, a %s%s" % (name, e["fd"], o["id"], o["type"], " (type made to match)" if same else "")


def x_fdinfo_dangling(c):
    """A task's fd names a file id that files.img does not hold."""
    files = c.load("files.img")
    name = fdinfo_of(c, c.rng.choice(task_pids(c)))
    fdi = c.load(name)
    e = c.rng.choice(fdi["entries"])
    e["id"] = max(files_by_id(files)) + 1 + c.rng.randrange(1000)
    c.save(name, fdi)
    return "%s fd %d -> file %d, not in files.img" % (name, e["fd"], e["id"])


def x_ids_files(c):
    """A task's ids names another task's fd table, or one no fdinfo image holds."""
    pids = task_pids(c)
    pid = c.rng.choice(pids)
    img = "ids-%d.img" % pid
    ids = c.load(img)
    tables = sorted({c.load("ids-%d.img" % p)["entries"][0]["files_id"] for p in pids} - {ids["entries"][0]["files_id"]})
    new = c.rng.choice(tables + [999]) if tables else 999
    ids["entries"][0]["files_id"] = new
    c.save(img, ids)
    return "%s files_id -> %d%s" % (img, new, "" if os.path.exists(c.path("fdinfo-%d.img" % new)) else " (no fdinfo image)")


def x_fs_root(c):
    """A task's root or cwd names a file that is no folder: a regular file, /dev/null, a socket."""
    files = c.load("files.img")
    pid = c.rng.choice(task_pids(c))
    img = "fs-%d.img" % pid
    fs = c.load(img)
    o = c.rng.choice([e for e in files["entries"] if not (e["type"] == "REG" and e["reg"]["name"] == "/")])
    f = c.rng.choice(["root_id", "cwd_id"])
    fs["entries"][0][f] = o["id"]
    c.save(img, fs)
    return "%s %s -> %s" % (img, f, describe_file(o))


def x_mm_file(c):
    """A task's executable or a file mapping names another file: a regular one, a socket, a pipe."""
    files = c.load("files.img")
    pid = c.rng.choice(task_pids(c))
    img = "mm-%d.img" % pid
    mm = c.load(img)
    e = mm["entries"][0]
    o = c.rng.choice([x for x in files["entries"] if x["id"] != e.get("exe_file_id")])
    if c.rng.random() < 0.4:
        e["exe_file_id"] = o["id"]
        what = "exe_file_id"
    else:
        vmas = [v for v in e["vmas"] if int(v["status"]) & 64]  # VMA_FILE_PRIVATE
        v = c.rng.choice(vmas)
        v["shmid"] = str(o["id"])
        what = "the mapping at %#x" % int(v["start"])
    c.save(img, mm)
    return "%s %s -> %s" % (img, what, describe_file(o))


def x_remap(c):
    """A remap's orig_id or remap_id names another file."""
    files = c.load("files.img")
    remaps = c.load("remap-fpath.img")
    r = c.rng.choice(remaps["entries"])
    f = c.rng.choice(["orig_id", "remap_id"])
    o = c.rng.choice([e for e in files["entries"] if e["id"] != r[f]])
    r[f] = o["id"]
    c.save("remap-fpath.img", remaps)
    return "remap-fpath %s -> %s" % (f, describe_file(o))


def x_pstree(c):
    """pstree.img names a task by another's pid (so restores it from the
    other's core, mm and files), a parent that is itself or its child, or
    another task's pid among its threads."""
    tree = c.load("pstree.img")
    ents = tree["entries"]
    a, b = c.rng.sample(ents, 2)
    what = c.rng.choice(["swap", "ppid-self", "ppid-child", "thread", "pgid"])
    if what == "swap":
        a["pid"], b["pid"] = b["pid"], a["pid"]
        a["threads"], b["threads"] = b["threads"], a["threads"]
        desc = "tasks %d and %d swap pids" % (a["pid"], b["pid"])
    elif what == "ppid-self":
        a["ppid"] = a["pid"]
        desc = "task %d its own parent" % a["pid"]
    elif what == "ppid-child":
        kids = [e for e in ents if e["ppid"] == ents[0]["pid"]]
        ents[0]["ppid"] = c.rng.choice(kids)["pid"]
        desc = "the root task a child of its child %d" % ents[0]["ppid"]
    elif what == "thread":
        a["threads"] = a["threads"] + [b["pid"]]
        desc = "task %d has task %d as a thread" % (a["pid"], b["pid"])
    else:
        a["pgid"] = a["sid"] = b["pid"]
        desc = "task %d in task %d's group and session" % (a["pid"], b["pid"])
    c.save("pstree.img", tree)
    return desc


def x_fifo(c):
    """The FIFO's regf_id names a regular file, or its pipe_id another pipe's."""
    files = c.load("files.img")
    f = next(e for e in files["entries"] if e["type"] == "FIFO")["fifo"]
    if c.rng.random() < 0.6:
        o = c.rng.choice(reg_entries(files, lambda r: r["id"] != f["regf_id"]))
        f["regf_id"] = o["id"]
        desc = "FIFO regf_id -> %s" % describe_file(o)
    else:
        p = next(e for e in files["entries"] if e["type"] == "PIPE")["pipe"]
        f["pipe_id"] = p["pipe_id"]
        desc = "FIFO pipe_id -> the pipe's %d" % p["pipe_id"]
    c.save("files.img", files)
    return desc


def x_unix_peer(c):
    """The unix socket's peer names the TCP socket's inode, or its own."""
    files = c.load("files.img")
    u = usk(files)["usk"]
    inet = [e["isk"]["ino"] for e in files["entries"] if e["type"] == "INETSK"]
    u["peer"] = c.rng.choice(inet + [u["ino"]])
    c.save("files.img", files)
    return "unix socket %d's peer -> inode %d (%s)" % (u["ino"], u["peer"], "its own" if u["peer"] == u["ino"] else "the TCP socket's")


def x_pipe_data(c):
    """Pipe or FIFO data names the other's pipe."""
    files = c.load("files.img")
    img = c.rng.choice(["pipes-data.img", "fifo-data.img"])
    d = c.load(img)
    ids = sorted({e["pipe"]["pipe_id"] for e in files["entries"] if e["type"] == "PIPE"} |
                 {e["fifo"]["pipe_id"] for e in files["entries"] if e["type"] == "FIFO"})
    e = d["entries"][0]
    e["pipe_id"] = c.rng.choice([i for i in ids if i != e["pipe_id"]])
    c.save(img, d)
    return "%s pipe_id -> %d" % (img, e["pipe_id"])


def x_lock_other(c):
    """A POSIX or flock lock of one task on an fd only another task holds,
    or of a pid no task has."""
    pids = task_pids(c)
    a = c.rng.choice(pids)
    mine = {e["fd"] for e in c.load(fdinfo_of(c, a))["entries"]}
    others = sorted({e["fd"] for p in pids if p != a for e in c.load(fdinfo_of(c, p))["entries"]} - mine)
    fd = c.rng.choice(others or [max(mine) + 7])
    pid = a if c.rng.random() < 0.8 else max(pids) + 100
    flag = c.rng.choice([1, 2])  # FL_POSIX, FL_FLOCK
    c.save("filelocks.img", {"magic": "FILE_LOCKS", "entries": [
        {"flag": flag, "type": 1, "pid": pid, "fd": fd, "start": "0", "len": "0"}]})
    return "a %s lock of pid %d on fd %d, %s" % ("POSIX" if flag == 1 else "flock", pid, fd,
                                                 "another task's" if others else "no task's")


def x_mount(c):
    """A mount's parent names itself or a mount below it; a file's mnt_id a mount of another kind."""
    img = c.images("mountpoints-")[0]
    m = c.load(img)
    ents = m["entries"]
    if c.rng.random() < 0.5:
        e = c.rng.choice([x for x in ents if x["mountpoint"] != "/"])
        kids = [x for x in ents if x["parent_mnt_id"] == e["mnt_id"]]
        e["parent_mnt_id"] = c.rng.choice(kids)["mnt_id"] if kids and c.rng.random() < 0.5 else e["mnt_id"]
        c.save(img, m)
        return "mount %s's parent -> mount %d%s" % (e["mountpoint"], e["parent_mnt_id"],
                                                    " (itself)" if e["parent_mnt_id"] == e["mnt_id"] else " (its child)")
    files = c.load("files.img")
    r = c.rng.choice(reg_entries(files))["reg"]
    o = c.rng.choice([x for x in ents if x["mnt_id"] != r.get("mnt_id")])
    r["mnt_id"] = o["mnt_id"]
    c.save("files.img", files)
    return "%s's mnt_id -> the mount at %s (%s)" % (r["name"], o["mountpoint"], o["source"])


XREFS = [x_fdinfo_kind, x_fdinfo_dangling, x_ids_files, x_fs_root, x_mm_file, x_remap, x_pstree, x_fifo,
         x_unix_peer, x_pipe_data, x_lock_other, x_mount]


def m_xref(c):
    """A key, id or name in one image made to point at an object of
    another: an fd at another kind of file or none, a task at another's fd
    table, root, executable or core, a remap, FIFO, socket peer, pipe data,
    lock or mount at another's object."""
    fns = list(XREFS)
    c.rng.shuffle(fns)
    for fn in fns:
        try:
            return fn(c)
        except (StopIteration, IndexError, KeyError, ValueError, SetupError):
            continue  # this shape has nothing to point from or at: the next
    raise SetupError("no cross-file reference fits this shape")


# ---- the two holes of issue 57, as mutations of their own --------------------

def m_pipe_key(c):
    """descriptors.json names a pipe key past the stdio, and a file of the
    images takes it: a REG entry a task holds renamed "/pipe:[N]", or a
    pipe of the task's own. runc hands CRIU its own descriptor of that index
    (3: CRIU's RPC socket to runc) as the inherited file, and CRIU gives it
    to the task."""
    rng = c.rng
    files = c.load("files.img")
    pipes = [e for e in files["entries"] if e["type"] == "PIPE"]
    if pipes and rng.random() < 0.4:
        key = "pipe:[%d]" % rng.choice(pipes)["pipe"]["pipe_id"]
        how = "the task's own pipe"
    else:
        held = {e["id"] for e in c.load(c.fdinfo_name())["entries"]}
        e = rng.choice(reg_entries(files, lambda r: r["id"] in held and r["name"] != "/"))
        key = rng.choice(["pipe:[%d]" % rng.randrange(1 << 20), "tmp/pipe:x"])
        how = "REG %s renamed /%s" % (e["reg"]["name"], key)
        e["reg"]["name"] = "/" + key
        c.save("files.img", files)
    i = rng.choice([3, 3, 3, 4, 5])
    write_descriptors(c, at_index(read_descriptors(c), i, key))
    return "descriptors.json[%d] = %s, %s" % (i, key, how)


def set_config_user(c, uid, gid):
    cfg_path = os.path.join(c.bundle, "config.json")
    with open(cfg_path) as f:
        cfg = json.load(f)
    cfg["process"]["user"] = {"uid": uid, "gid": gid}
    with open(cfg_path, "w") as f:
        json.dump(cfg, f, indent=1)


def run_as(c, uid):
    """Every task's credentials UID (and gid), without capabilities, and the
    config's user the same: a container run as that user."""
    for pid in task_pids(c):
        img = "core-%d.img" % pid
        core = c.load(img)
        cr = core["entries"][0]["thread_core"]["creds"]
        for k in ("uid", "euid", "suid", "fsuid", "gid", "egid", "sgid", "fsgid"):
            cr[k] = uid
        for k in ("cap_inh", "cap_prm", "cap_eff", "cap_amb"):
            cr[k] = [0, 0]
        c.save(img, core)
    # What the tasks made is theirs: a ghost file, a bound socket's file.
    for img in c.images("ghost-file-"):
        g = c.load(img)
        g["entries"][0]["uid"] = g["entries"][0]["gid"] = uid
        c.save(img, g)
    files = c.load("files.img")
    for e in files["entries"]:
        if e["type"] == "UNIXSK" and "file_perms" in e["usk"]:
            e["usk"]["file_perms"].update(uid=uid, gid=uid)
    c.save("files.img", files)
    set_config_user(c, uid, uid)


def m_lease(c):
    """filelocks.img holds a lease on a file the root task holds and does not
    own (a root-owned file of the rootfs or of a host folder bound in), the
    tasks restored as uid 1000 (the config's user too): CRIU sets a lease as
    the file's owner (setfsuid to it), which the task could not."""
    rng = c.rng
    files = files_by_id(c.load("files.img"))
    root = c.root_pid()
    ghosts = set()
    if os.path.exists(c.path("remap-fpath.img")):
        ghosts = {r["orig_id"] for r in c.load("remap-fpath.img")["entries"]}
    # A regular file the dump left root's (not a ghost, which run_as gives
    # the tasks' user).
    fds = [e for e in c.load(c.fdinfo_name())["entries"] if e["type"] == "REG" and e["id"] not in ghosts
           and stat.S_ISREG(files[e["id"]]["reg"].get("mode", 0))]
    e = rng.choice(fds)
    uid = 1000 if rng.random() < 0.8 else 0
    if uid:
        run_as(c, uid)
    # F_RDLCK, F_WRLCK, or a lease being broken (LEASE_BREAKING | the type
    # it breaks to: CRIU opens the file by name again to break it).
    typ = rng.choice([0, 0, 1, 4 | 0, 4 | 2])
    c.save("filelocks.img", {"magic": "FILE_LOCKS", "entries": [
        {"flag": 8, "type": typ, "pid": root, "fd": e["fd"], "start": "0", "len": "0"}]})  # FL_LEASE
    return "a %s lease of task %d on fd %d (%s, owner root), tasks as uid %d" % (
        {0: "read", 1: "write", 4: "breaking (to read)", 6: "breaking (to none)"}[typ], root, e["fd"], files[e["id"]]["reg"]["name"], uid)


# kind -> (mutation, shapes it applies to)
MUTATIONS = {
    "reg-name": (m_reg_name, ["loop", "files", "vol"]),
    "reg-unused": (m_reg_unused, ["loop", "files", "vol"]),
    "ghost-name": (m_ghost_name, ["files"]),
    "ghost-fields": (m_ghost_fields, ["files"]),
    "link-remap": (m_link_remap, ["loop", "files", "vol"]),
    "fifo": (m_fifo, ["files"]),
    "unix-name": (m_unix_name, ["files"]),
    "unix-peer": (m_unix_peer, ["files"]),
    "inet": (m_inet, ["files"]),
    "extra-task": (m_extra_task, ["loop", "files"]),
    "unknown-image": (m_unknown_image, ["loop", "files"]),
    "tmpfs-tar": (m_tmpfs_tar, ["loop", "files"]),
    "oversized": (m_oversized, ["loop", "files"]),
    "rootfs-swap": (m_rootfs_swap, ["loop", "files", "vol"]),
    "creds": (m_creds, ["loop", "files"]),
    "mountpoint": (m_mountpoint, ["loop", "vol"]),
    "field-task": (m_field_task, ["loop", "files", "vol"]),
    "field-files": (m_field_files, ["files"]),  # the shape with the most file images
    "field-ns": (m_field_ns, ["loop", "files", "vol"]),
    "raw-bytes": (m_raw_bytes, ["loop", "files", "vol"]),
    "descriptors": (m_descriptors, ["loop", "files", "vol"]),
    "xref": (m_xref, ["loop", "files", "vol"]),
    "pipe-key": (m_pipe_key, ["loop", "files", "vol"]),
    "lease": (m_lease, ["files", "vol"]),
}
KINDS = list(MUTATIONS)


# ---- after a restore --------------------------------------------------------

def pids():
    return [int(p) for p in os.listdir("/proc") if p.isdigit()]


def holders(tree):
    """Processes other than this one with their root, cwd, executable or a
    descriptor under TREE."""
    me = os.getpid()
    out = {}
    for p in pids():
        if p == me:
            continue
        links = ["root", "cwd", "exe"]
        try:
            links += ["fd/" + f for f in os.listdir("/proc/%d/fd" % p)]
        except OSError:
            continue
        for l in links:
            try:
                t = os.readlink("/proc/%d/%s" % (p, l))
            except OSError:
                continue
            if t == tree or t.startswith(tree + "/"):
                out[p] = comm(p)
                break
    return out


def comm(p):
    try:
        with open("/proc/%d/comm" % p) as f:
            return f.read().strip()
    except OSError:
        return "?"


def mounts_under(tree):
    out = []
    with open("/proc/self/mountinfo") as f:
        for line in f:
            fields = line.split()
            if fields[4] == tree or fields[4].startswith(tree + "/") or fields[3].startswith(tree + "/"):
                out.append(fields[4])
    return out


def cgroup_dirs(name):
    """The container's cgroup folders: runc puts a container without a
    cgroupsPath at NAME below its own cgroup of each hierarchy."""
    own = {"/"}
    with open("/proc/self/cgroup") as f:
        own |= {l.rstrip("\n").split(":", 2)[2] for l in f}
    out = []
    base = "/sys/fs/cgroup"
    for h in [""] + os.listdir(base):
        for o in own:
            p = os.path.normpath(os.path.join(base, h, o.lstrip("/"), name))
            if os.path.isdir(p) and p not in out:
                out.append(p)
    return out


def cgroup_procs(name):
    """The processes in container NAME's cgroups."""
    out = []
    for p in cgroup_dirs(name):
        try:
            with open(os.path.join(p, "cgroup.procs")) as f:
                out += [int(x) for x in f.read().split() if int(x) not in out]
        except OSError:
            pass
    return out


def ns_of(p):
    out = {}
    for n in ("pid", "net", "ipc", "uts", "mnt", "user", "cgroup", "time"):
        try:
            out[n] = os.readlink("/proc/%d/ns/%s" % (p, n))
        except OSError:
            pass
    return out


# Device nodes a runc spec gives every container.
DEFAULT_DEVICES = {(1, 3), (1, 5), (1, 7), (1, 8), (1, 9), (5, 0), (5, 1), (5, 2)}


def inspect_restored(tools, name, canaries):
    """What a restored container holds that its spec does not give it:
    (failures, notes)."""
    bad, notes = [], []
    p = tools.r("ps", "--format", "json", name)
    try:
        tasks = json.loads(p.stdout) or []
    except ValueError:
        tasks = []
    st = tools.r("state", name)
    try:
        init = json.loads(st.stdout)["pid"]
    except (ValueError, KeyError):
        return ["runc state %s: %s" % (name, st.stdout.strip())], notes
    want = ns_of(init)
    inodes = canaries.inodes()
    tasks = [t for t in tasks if os.path.isdir("/proc/%d" % t)]
    bad += host_sockets(set(tasks))
    bad += lock_findings(set(tasks), canaries)
    for t in tasks:
        have = ns_of(t)
        for n, v in have.items():
            if want.get(n) == v:
                continue
            # The host's namespace, or a user namespace of the image's
            # making (its id maps are the image's word), is an escape; a new
            # namespace of another type only a note.
            if v == os.readlink("/proc/self/ns/" + n) or n == "user":
                bad.append("task %d (%s) is in %s %s namespace, not the container's" % (
                    t, comm(t), "the host's" if n != "user" or v == os.readlink("/proc/self/ns/user") else "another", n))
            else:
                notes.append("task %d in a new %s namespace" % (t, n))
        try:
            fds = os.listdir("/proc/%d/fd" % t)
        except OSError:
            continue
        for fd in fds:
            try:
                s = os.stat("/proc/%d/fd/%s" % (t, fd))
            except OSError:
                continue
            if (s.st_dev, s.st_ino) in inodes:
                bad.append("task %d holds a canary open (fd %s -> %s)" % (t, fd, os.readlink("/proc/%d/fd/%s" % (t, fd))))
    # Peers of the container's unix sockets: ss in its network namespace.
    if shutil.which("ss") and shutil.which("nsenter"):
        ss = sh("nsenter", "-t", str(init), "-n", "ss", "-xanH")
        for line in ss.stdout.splitlines():
            cols = line.split()
            if len(cols) >= 8 and cols[-1].isdigit() and int(cols[-1]) in canaries.ino:
                bad.append("a unix socket of the container is connected to a host canary socket: %s" % line.strip())
    # Device nodes in its /dev beyond the defaults.
    dev = "/proc/%d/root/dev" % init
    try:
        for n in os.listdir(dev):
            s = os.lstat(os.path.join(dev, n))
            if (stat.S_ISCHR(s.st_mode) or stat.S_ISBLK(s.st_mode)):
                mm = (os.major(s.st_rdev), os.minor(s.st_rdev))
                if mm not in DEFAULT_DEVICES and mm[0] != 136:
                    bad.append("the restored /dev holds %s, device %d:%d" % (n, mm[0], mm[1]))
    except OSError:
        pass
    return bad, sorted(set(notes))


def stdio_keys(case):
    """The keys CRIU names the root task's stdio pipes by ("pipe:[N]" of
    its fds 0-2): what runc may have CRIU inherit, its own stdio."""
    try:
        files = files_by_id(case.load("files.img"))
        fds = case.load(case.fdinfo_name())["entries"]
    except (SetupError, KeyError, IndexError, ValueError):
        return set()
    return {"pipe:[%d]" % files[e["id"]]["pipe"]["pipe_id"] for e in fds
            if e["fd"] < 3 and files.get(e["id"], {}).get("type") == "PIPE"}


def inherited_past_stdio(case):
    """Files CRIU restored from a descriptor runc had it inherit under a
    key that descriptors.json put past the stdio (CRIU's log: "Found id K
    (fd N) in inherit fd list"): runc hands CRIU its own descriptor of that
    index, and 3 is CRIU's RPC socket to runc."""
    try:
        with open(os.path.join(case.work, "restore.log"), errors="replace") as f:
            found = re.findall(r"Found id (.*) \(fd -?\d+\) in inherit fd list", f.read())
        with open(case.path("descriptors.json")) as f:
            fds = json.load(f)
    except (OSError, ValueError):
        return []
    if not found or not isinstance(fds, list):
        return []
    legit = stdio_keys(case)
    out = []
    for key in dict.fromkeys(found):
        past = [i for i, v in enumerate(fds) if v == key and i >= 3]
        if past and key not in legit:
            out.append("CRIU gave a restored file runc's fd %d (%s), inherited under the key %r that "
                       "descriptors.json's entry %d chose" % (
                           past[0], "CRIU's RPC socket to runc" if past[0] == 3 else "no stdio descriptor",
                           key[:60], past[0]))
    return out


def host_sockets(tasks):
    """Sockets of the host's network namespace (ours) that restored tasks
    hold: a container's own are in its namespace; runc's RPC socket to CRIU
    (a unix seqpacket one) is the host's."""
    if not shutil.which("ss"):
        return []
    held = {}
    p = sh("ss", "-H", "-a", "-p", "-x", "-t", "-u", "-w")
    for line in p.stdout.splitlines():
        cols = line.split()
        what = "%s socket %s" % (cols[0], cols[5] if cols[0].startswith("u_") and len(cols) > 5 else cols[4])
        for name, pid, fd in re.findall(r'\("([^"]*)",pid=(\d+),fd=(\d+)\)', line):
            if int(pid) in tasks:
                held.setdefault((int(pid), name, what), []).append(int(fd))
    return ["task %d (%s) holds a %s of the host's network namespace as fd %s" % (
        pid, name, what, ",".join(map(str, sorted(fds)))) for (pid, name, what), fds in sorted(held.items())]


CAP_LEASE = 28


def task_creds(t):
    """(fsuid, effective capabilities) of task T."""
    fsuid, caps = None, 0
    with open("/proc/%d/status" % t) as f:
        for line in f:
            if line.startswith("Uid:"):
                fsuid = int(line.split()[4])
            elif line.startswith("CapEff:"):
                caps = int(line.split()[1], 16)
    return fsuid, caps


def task_files(t):
    """(major, minor, inode) -> (fd, path, owner) of what task T holds open."""
    out = {}
    try:
        fds = os.listdir("/proc/%d/fd" % t)
    except OSError:
        return out
    for fd in fds:
        p = "/proc/%d/fd/%s" % (t, fd)
        try:
            s = os.stat(p)
            out[(os.major(s.st_dev), os.minor(s.st_dev), s.st_ino)] = (fd, os.readlink(p), s.st_uid)
        except OSError:
            pass
    return out


def lock_findings(tasks, canaries):
    """Locks in /proc/locks the kernel would not have let the restored tasks
    take: a lease on a file the task neither owns nor has CAP_LEASE for
    (CRIU takes it as the file's owner), a lock of theirs on a file they do
    not hold; and any lock on a canary."""
    out = []
    try:
        with open("/proc/locks") as f:
            lines = f.read().splitlines()
    except OSError:
        return out
    canary = {(os.major(d), os.minor(d), i) for d, i in canaries.inodes()}
    held = {t: task_files(t) for t in tasks}
    for line in lines:
        f = line.split()
        if len(f) < 6 or f[1] == "->":
            continue  # a waiter's line
        kind, rw, pid, where = f[1], f[3], int(f[4]) if f[4].lstrip("-").isdigit() else -1, f[5].split(":")
        if len(where) != 3:
            continue
        key = (int(where[0], 16), int(where[1], 16), int(where[2]))
        if key in canary:
            out.append("a %s %s lock on a canary (%s)" % (rw, kind, line.strip()))
        if pid not in tasks:
            continue
        # A flock or lease belongs to an open file, which a child may hold.
        mine = held[pid].get(key) or next((h[key] for h in held.values() if key in h), None)
        if not mine:
            out.append("task %d holds a %s %s lock on inode %s that no restored task has open" % (pid, rw, kind, f[5]))
            continue
        fd, path, owner = mine
        fsuid, caps = task_creds(pid)
        if kind == "LEASE" and owner != fsuid and not caps & (1 << CAP_LEASE):
            out.append("task %d (uid %d, no CAP_LEASE) holds a %s lease on %s (fd %s), which uid %d owns" % (
                pid, fsuid, rw, path, fd, owner))
    return out


def first_error(log):
    try:
        with open(log, errors="replace") as f:
            lines = f.readlines()
    except OSError:
        return None
    # The first error is the cause; CRIU logs one that it survives on every
    # restore here (it may not raise its own RLIMIT_NOFILE).
    for l in lines:
        if "Error (" in l and "RLIMIT_NOFILE for self" not in l:
            return log_text(l)[:200]
    return log_text(lines[-1])[:200] if lines else "restore.log is empty"


def log_text(line):
    """A CRIU log line without its time and pid: "(00.036) 9: Error ..."."""
    return re.sub(r"^\([0-9.]+\)\s*(\d+:\s*)?", "", line).strip()


def last_word(log):
    """What CRIU logged last before it was killed."""
    try:
        with open(log, errors="replace") as f:
            lines = [l for l in f if l.strip()]
    except OSError:
        return "no restore.log"
    # What it was doing when the kill came.
    for i, l in enumerate(lines):
        if "killed by signal" in l or "Restoring FAILED" in l:
            lines = lines[:i]
            break
    return log_text(lines[-1])[:160] if lines else "nothing"


def in_session(sid):
    """Processes of session SID: the restore's runc and CRIU, and whatever
    they started that did not leave it."""
    out = []
    for p in pids():
        try:
            with open("/proc/%d/stat" % p) as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        # After pid and comm: state ppid pgrp session. A zombie is gone.
        if int(fields[3]) == sid and fields[0] != "Z":
            out.append(p)
    return out


def cleanup(tools, name, tree, sid):
    """Remove the container and whatever it left; returns what had to be
    removed by force (besides what runc delete does)."""
    if name in tools.running():
        tools.r("kill", name, "KILL")
        tools.r("delete", "-f", name)
    left = []
    # CRIU may still be on its way out when runc has answered.
    for _ in range(50):
        if not in_session(sid):
            break
        time.sleep(0.1)
    for p in in_session(sid):
        left.append("process %d (%s) of the restore's session" % (p, comm(p)))
        try:
            os.kill(p, 9)  # ours: runc restore's session
        except OSError:
            pass
    for p in cgroup_dirs(name):
        try:
            with open(os.path.join(p, "cgroup.procs")) as f:
                procs = [int(x) for x in f.read().split()]
        except OSError:
            procs = []
        for x in procs:
            left.append("process %d (%s) in cgroup %s" % (x, comm(x), p))
            try:
                os.kill(x, 9)
            except OSError:
                pass
    for _ in range(25):
        h = holders(tree)
        if not h:
            break
        time.sleep(0.2)
    for p, c in holders(tree).items():
        left.append("process %d (%s) holds %s" % (p, c, tree))
        try:
            os.kill(p, 9)  # ours: started by the restore this case ran
        except OSError:
            pass
    time.sleep(0.2)
    for m in mounts_under(tree):
        left.append("mount %s" % m)
    for m in reversed(mounts_under(tree)):
        sh("umount", "-l", m)
    for p in cgroup_dirs(name):
        for _ in range(10):
            try:
                os.rmdir(p)
                break
            except OSError:
                time.sleep(0.2)
        else:
            left.append("cgroup %s" % p)
    return left


def restore(tools, case, name, canaries):
    """Restore CASE as NAME; returns (outcome, detail, failures)."""
    out = os.path.join(case.dir, "runc.out")
    cmd = ["timeout", "-k", "5", str(tools.timeout)] + tools.runc_cmd(
        "restore", "-d", "--file-locks", "--image-path", case.img, "--work-path", case.work, "--bundle", case.bundle, name)
    t0 = time.monotonic()
    # runc's output goes to a file: with -d the container may keep a pipe
    # open for as long as it runs.
    with open(out, "w") as o, open(os.devnull) as null:
        p = subprocess.Popen(cmd, stdin=null, stdout=o, stderr=o, env=tools.env, start_new_session=True)
        try:
            rc = p.wait(timeout=tools.timeout + 20)
        except subprocess.TimeoutExpired:
            # timeout(1) itself did not end it: kill its session, ours.
            os.killpg(p.pid, signal.SIGKILL)
            p.wait()
            rc = 124
    took = time.monotonic() - t0
    with open(out, errors="replace") as f:
        text = f.read()
    fails = []
    # timeout(1) signals its own process group, itself too, when it kills.
    if rc in (124, 137) or rc < 0:
        outcome, detail = "hang", "no answer in %ds" % tools.timeout
        fails.append("hang: runc restore ran past %ds (CRIU's last word: %s)" % (tools.timeout, last_word(os.path.join(case.work, "restore.log"))))
        # Whom runc was waiting for: a task holding its socket to CRIU?
        fails += host_sockets(set(cgroup_procs(name)))
    elif rc == 0 and name in tools.running():
        bad, notes = inspect_restored(tools, name, canaries)
        outcome, detail = "restored", (" (" + "; ".join(notes) + ")") if notes else ""
        fails += bad
    elif "refusing to restore" in text:
        outcome = "runc"
        detail = text[text.index("refusing to restore"):].split("\n")[0].rstrip('"')[:240]
    elif os.path.exists(os.path.join(case.work, "restore.log")):
        outcome, detail = "criu", first_error(os.path.join(case.work, "restore.log"))
    else:
        outcome = "other"
        lines = [l for l in text.splitlines() if l.strip()]
        detail = (lines[-1] if lines else "exit %d, no output" % rc)[:240]
    if rc == 0 and outcome != "restored":
        fails.append("runc restore said 0 but %s is not running" % name)
    fails += inherited_past_stdio(case)
    fails += ["leftover: " + x for x in cleanup(tools, name, case.dir, p.pid)]
    fails += ["canary: " + x for x in canaries.broken()]
    return outcome, detail, fails, took


# ---- driving cases ----------------------------------------------------------

def copy_tree(src, dst):
    p = sh("cp", "-a", src, dst)
    if p.returncode != 0:
        raise SetupError("cp -a %s %s: %s" % (src, dst, p.stdout))


def point_vol(case, vol):
    """Bind the case's own copy of the shape's volume."""
    cfg_path = os.path.join(case.bundle, "config.json")
    with open(cfg_path) as f:
        cfg = json.load(f)
    for m in cfg["mounts"]:
        if m["destination"] == "/vol":
            m["source"] = vol
    with open(cfg_path, "w") as f:
        json.dump(cfg, f, indent=1)


def report(seed, shape, kind, desc, outcome, detail, fails, took):
    words = {"runc": "refused by runc: ", "criu": "failed in CRIU: ", "restored": "restored harmlessly",
             "other": "refused: ", "hang": "hang"}
    if fails:
        res = "FAIL: " + "; ".join(fails)
        if outcome != "hang":
            res += " [%s%s]" % (words[outcome], detail)
    else:
        res = words[outcome] + detail
    print("seed=%d shape=%s kind=%s: %s -> %s (%.1fs)" % (seed, shape, kind, desc, res, took), flush=True)


def classify(outcome, fails):
    if any(f.startswith("canary") for f in fails):
        return "FAIL canary"
    # A task that took what is runc's or the host's, even if runc then hung.
    if any(not f.startswith(("hang", "leftover")) for f in fails):
        return "FAIL escape"
    if any(f.startswith("hang") for f in fails):
        return "FAIL hang"
    if fails:
        return "FAIL leftover"
    return {"runc": "refused by runc", "criu": "failed in CRIU", "restored": "restored",
            "other": "refused (other)", "hang": "FAIL hang"}[outcome]


def keep_case(keep, case, meta):
    if not keep:
        return
    dst = os.path.join(keep, "seed-%d" % meta["seed"])
    rmtree(dst)
    os.makedirs(dst)
    for part in ("img", "bundle", "vol"):
        src = os.path.join(case.dir, part)
        if os.path.exists(src):
            copy_tree(src, os.path.join(dst, part))
    with open(os.path.join(dst, "case.json"), "w") as f:
        json.dump(meta, f, indent=1)


def run_case(tools, work, canaries, shapes, seed, only, keep):
    rng = random.Random(seed)
    kinds = [k for k in KINDS if not only or k in only]
    kind = kinds[seed % len(kinds)]
    fn, allowed = MUTATIONS[kind]
    fits = [s for s in allowed if s in shapes]
    if not fits:
        print("seed=%d kind=%s: no shape of %s was dumped -> skipped" % (seed, kind, ",".join(allowed)), flush=True)
        return kind, "skipped", set()
    shape = rng.choice(fits)
    cdir = os.path.join(work, "cases", str(seed))
    os.makedirs(cdir)
    case = Case(tools, cdir, canaries, rng)
    case.round = seed // len(kinds)
    copy_tree(os.path.join(shapes[shape], "img"), case.img)
    copy_tree(os.path.join(shapes[shape], "bundle"), case.bundle)
    if shape == "vol":
        copy_tree(os.path.join(shapes[shape], "vol"), os.path.join(cdir, "vol"))
        point_vol(case, os.path.join(cdir, "vol"))
    try:
        desc = fn(case)
    except (StopIteration, IndexError, KeyError, SetupError) as e:
        desc = "mutation not applicable (%s: %s)" % (type(e).__name__, e)
        print("seed=%d shape=%s kind=%s: %s -> skipped" % (seed, shape, kind, desc), flush=True)
        rmtree(cdir)
        return kind, "skipped", set()
    canaries.quiet()
    name = "fz-%d-%d" % (seed, os.getpid())
    outcome, detail, fails, took = restore(tools, case, name, canaries)
    report(seed, shape, kind, desc, outcome, detail, fails, took)
    cls = classify(outcome, fails)
    if fails:
        keep_case(keep, case, {"seed": seed, "shape": shape, "kind": kind, "mutation": desc,
                               "canary_dir": canaries.dir, "outcome": cls, "failures": fails})
        canaries.make()
    rmtree(cdir)
    return kind, cls, case.touched


def replay(tools, work, dir):
    """Restore kept cases again: their canaries at the paths the images name."""
    metas = []
    for top in [dir] + [os.path.join(dir, n) for n in sorted(os.listdir(dir))]:
        if os.path.isfile(os.path.join(top, "case.json")):
            with open(os.path.join(top, "case.json")) as f:
                metas.append((top, json.load(f)))
    if not metas:
        raise SetupError("no case.json under %s" % dir)
    failed = 0
    for top, meta in metas:
        if os.path.lexists(meta["canary_dir"]) and not os.path.isdir(os.path.join(meta["canary_dir"], "victim")):
            raise SetupError("%s exists and is not a canary folder: move it away to replay" % meta["canary_dir"])
        canaries = Canaries(meta["canary_dir"])
        made = not os.path.isdir(os.path.dirname(meta["canary_dir"]))
        os.makedirs(os.path.dirname(meta["canary_dir"]), exist_ok=True)
        canaries.make()
        cdir = os.path.join(work, "cases", "replay-%d" % meta["seed"])
        os.makedirs(cdir)
        case = Case(tools, cdir, canaries, random.Random(meta["seed"]))
        for part in ("img", "bundle", "vol"):
            if os.path.exists(os.path.join(top, part)):
                copy_tree(os.path.join(top, part), os.path.join(cdir, part))
        if os.path.exists(os.path.join(cdir, "vol")):
            point_vol(case, os.path.join(cdir, "vol"))
        name = "fz-replay-%d-%d" % (meta["seed"], os.getpid())
        outcome, detail, fails, took = restore(tools, case, name, canaries)
        report(meta["seed"], meta["shape"], meta["kind"], meta["mutation"] + " (replayed)", outcome, detail, fails, took)
        failed += bool(fails)
        canaries.close()
        rmtree(cdir)
        rmtree(canaries.dir)
        if made:
            os.rmdir(os.path.dirname(meta["canary_dir"]))
    return failed


COLUMNS = ["refused by runc", "failed in CRIU", "refused (other)", "restored", "skipped",
           "FAIL canary", "FAIL hang", "FAIL leftover", "FAIL escape"]


def runc_image_list():
    """The image files runc's guard lets through, from its table
    (imageFiles: in guard/check/images.go, or in the runc series before it
    moved there)."""
    srcs = [os.path.join(REPO, "guard", "check", "images.go")]
    pd = os.path.join(REPO, "runc-patches")
    srcs += [os.path.join(pd, n) for n in sorted(os.listdir(pd)) if "refuse-image-files-and-file-kinds" in n]
    out = []
    for src in srcs:
        if os.path.isfile(src):
            with open(src) as f:
                out += re.findall(r'^\+?\t\{"([^"]+)", "[^"]*"\},$', f.read(), flags=re.M)
    return list(dict.fromkeys(out))


def print_summary(tally, by_file):
    """Outcomes per mutation kind, then per kind of file the mutations
    changed (a case counts for each file kind it changed)."""
    print("%-14s" % "kind" + "".join("%16s" % c for c in COLUMNS))
    for k in KINDS:
        if k in tally:
            print("%-14s" % k + "".join("%16s" % (tally[k].get(c, "") or "") for c in COLUMNS))
    cols = ["tried", "refused by runc", "failed in CRIU", "refused (other)", "restored", "FAIL"]
    print("\n%-24s" % "file kind" + "".join("%16s" % c for c in cols))
    for f in sorted(by_file):
        t = by_file[f]
        row = [sum(t.values()), t.get("refused by runc"), t.get("failed in CRIU"), t.get("refused (other)"),
               t.get("restored"), sum(v for k, v in t.items() if k.startswith("FAIL"))]
        print("%-24s" % f + "".join("%16s" % (v or "") for v in row))


STOP = []


def stop(signum, frame):
    # Finish the case at hand and clean up, rather than leave a container.
    STOP.append(signum)


def main():
    signal.signal(signal.SIGINT, stop)
    signal.signal(signal.SIGTERM, stop)
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seed", type=int, help="first case's seed (default: random, printed)")
    ap.add_argument("--cases", type=int, default=len(KINDS), help="how many cases (default: one per mutation kind)")
    ap.add_argument("--runc", default=os.path.join(BIN, "runc"))
    ap.add_argument("--crit", default=os.path.join(BIN, "crit"))
    ap.add_argument("--timeout", type=int, default=60, help="seconds a restore may take before it counts as a hang")
    ap.add_argument("--keep", help="copy failing cases (images, bundle, case.json) under this folder")
    ap.add_argument("--replay", help="restore the cases kept under this folder again")
    ap.add_argument("--only", action="append", choices=KINDS, help="only this mutation kind (repeatable)")
    ap.add_argument("--shapes", default="loop,files,vol", help="shapes to dump (default: loop,files,vol)")
    ap.add_argument("--list", action="store_true", help="list the mutation kinds and exit")
    a = ap.parse_args()
    if a.list:
        for k, (fn, shapes) in MUTATIONS.items():
            print("%-14s %s [%s]" % (k, fn.__doc__.split("\n")[0], ",".join(shapes)))
        fields = {n for names in FIELD_IMAGES.values() for n in names}
        raw = [n for n in runc_image_list() if n not in fields and n != "descriptors.json"]
        print("\nimage files of runc's list that only raw-bytes changes: " + (" ".join(raw) or "none"))
        return 0
    if os.geteuid() != 0:
        print("fuzz-images: run as root", file=sys.stderr)
        return 2
    for t in (a.runc, a.crit):
        if not os.access(t, os.X_OK):
            print("fuzz-images: %s is not built (run 'make build')" % t, file=sys.stderr)
            return 2
    # A short folder: the canary sockets' paths must fit in sun_path.
    base = os.environ.get("TMPDIR", "/tmp")
    if len(base) > 60:
        base = "/tmp"
    work = tempfile.mkdtemp(prefix="rk-fuzz.", dir=base)
    tools = Tools(os.path.abspath(a.runc), os.path.abspath(a.crit), os.path.join(work, "runc"), a.timeout)
    if not tools.schema.msgs:
        print("fuzz-images: no CRIU .proto files in %s (set REKINDLE_CRIU_PROTOS): the field kinds change "
              "only fields the dump wrote" % PROTOS, flush=True)
    if a.keep:
        os.makedirs(a.keep, exist_ok=True)
        a.keep = os.path.abspath(a.keep)
    t0 = time.monotonic()
    try:
        if a.replay:
            return 1 if replay(tools, work, os.path.abspath(a.replay)) else 0
        seed = a.seed if a.seed is not None else random.randrange(1 << 31)
        print("fuzz-images: seed %d, %d cases, work %s" % (seed, a.cases, work), flush=True)
        canaries = Canaries(os.path.join(work, "canary"))
        canaries.make()
        shapes = {}
        for s in a.shapes.split(","):
            shapes[s] = dump_shape(tools, work, s)
        tally, by_file = {}, {}
        failed = 0
        for i in range(a.cases):
            if STOP:
                print("fuzz-images: stopped by a signal after %d cases" % i, flush=True)
                a.cases = i
                failed += 1
                break
            kind, cls, touched = run_case(tools, work, canaries, shapes, seed + i, a.only, a.keep)
            tally.setdefault(kind, {}).setdefault(cls, 0)
            tally[kind][cls] += 1
            for f in touched:
                by_file.setdefault(f, {}).setdefault(cls, 0)
                by_file[f][cls] += 1
            failed += cls.startswith("FAIL")
        canaries.close()
        print("\nfuzz-images: %d cases in %.0fs, %d failed (seed %d)" % (a.cases, time.monotonic() - t0, failed, seed))
        print_summary(tally, by_file)
        return 1 if failed else 0
    except SetupError as e:
        print("fuzz-images: setup failed: %s" % e, file=sys.stderr)
        return 2
    finally:
        for n in tools.running():
            if n.startswith("fz-"):
                tools.r("delete", "-f", n)
        left = mounts_under(work)
        for m in reversed(left):
            sh("umount", "-l", m)
        rmtree(work)


if __name__ == "__main__":
    sys.exit(main())
