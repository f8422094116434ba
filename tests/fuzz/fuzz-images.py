#!/usr/bin/env python3
"""Hostile-image fuzzer: restore real CRIU dumps after seeded random mutations.

A checkpoint image is hostile until proven otherwise (docs/security.md). This
takes real dumps of busybox containers (`runc checkpoint`, as 470's bundle and
dump make them), changes what CRIU reads from them (names, sizes, counts,
modes, tasks, namespaces, image files, the rootfs the names resolve in), and
restores each with `runc restore` under a hard timeout, beside canaries that
the mutations aim at. A case passes when the restore is refused with a named
reason or restores harmlessly, the canaries are untouched, nothing hangs and
nothing is left behind. One line per case; exit 1 when any case fails.

Reproduce a case with --seed SEED --cases 1 (its seed picks its mutation and
shape), or keep failing cases with --keep DIR and restore them again with
--replay DIR. Runs as root; needs busybox, crit and the built runc and criu.
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
        return json.loads(p.stdout)

    def encode(self, path, data):
        # crit decodes the raw bytes that follow an entry (a ghost file's or
        # a pipe's contents) as "extra" but does not encode them: write them
        # after the entries ourselves. Only the last entry has them here.
        extra = b""
        for e in data.get("entries", []):
            if "extra" in e:
                extra += base64.b64decode(e.pop("extra"))
        tmp = path + ".json"
        with open(tmp, "w") as f:
            json.dump(data, f)
        p = sh(self.crit, "encode", "-i", tmp, "-o", path)
        os.unlink(tmp)
        if p.returncode != 0:
            raise SetupError("crit encode %s: %s" % (path, p.stdout.strip()))
        if extra:
            with open(path, "ab") as f:
                f.write(extra)

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
    p = tools.r("checkpoint", "--image-path", os.path.join(dir, "img"),
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

    def path(self, name):
        return os.path.join(self.img, name)

    def load(self, name):
        return self.tools.decode(self.path(name))

    def save(self, name, d):
        self.tools.encode(self.path(name), d)

    def images(self, prefix):
        return sorted(n for n in os.listdir(self.img) if n.startswith(prefix))

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
        "restore", "-d", "--image-path", case.img, "--work-path", case.work, "--bundle", case.bundle, name)
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
    if rc in (124, 137):
        outcome, detail = "hang", "no answer in %ds" % tools.timeout
        fails.append("hang: runc restore ran past %ds (CRIU's last word: %s)" % (tools.timeout, last_word(os.path.join(case.work, "restore.log"))))
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
    if any(f.startswith("hang") for f in fails):
        return "FAIL hang"
    if any(f.startswith("canary") for f in fails):
        return "FAIL canary"
    if any(f.startswith("leftover") for f in fails):
        return "FAIL leftover"
    if fails:
        return "FAIL escape"
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
        return kind, "skipped"
    shape = rng.choice(fits)
    cdir = os.path.join(work, "cases", str(seed))
    os.makedirs(cdir)
    case = Case(tools, cdir, canaries, rng)
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
        return kind, "skipped"
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
    return kind, cls


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
        tally = {}
        failed = 0
        for i in range(a.cases):
            if STOP:
                print("fuzz-images: stopped by a signal after %d cases" % i, flush=True)
                a.cases = i
                failed += 1
                break
            kind, cls = run_case(tools, work, canaries, shapes, seed + i, a.only, a.keep)
            tally.setdefault(kind, {}).setdefault(cls, 0)
            tally[kind][cls] += 1
            failed += cls.startswith("FAIL")
        canaries.close()
        print("\nfuzz-images: %d cases in %.0fs, %d failed (seed %d)" % (a.cases, time.monotonic() - t0, failed, seed))
        cols = ["refused by runc", "failed in CRIU", "refused (other)", "restored", "skipped",
                "FAIL canary", "FAIL hang", "FAIL leftover", "FAIL escape"]
        print("%-14s" % "kind" + "".join("%16s" % c for c in cols))
        for k in KINDS:
            if k in tally:
                print("%-14s" % k + "".join("%16s" % (tally[k].get(c, "") or "") for c in cols))
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
