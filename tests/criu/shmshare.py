#!/usr/bin/env python3
"""shmshare.py OUT: two processes sharing a deleted /dev/shm file, as NCCL's
shared-memory transport between two GPU workers does: the first creates the
file, the second (a process of its own, not a fork) opens it by name and
maps it, then the name is removed. Each keeps it mapped MAP_SHARED.

OUT/ready gets the first process's pid once both map the file. Then:
SIGUSR1 to the second process: it adds 1 to the counter at offset 0 of the
mapping and writes the new value to OUT/wrote. SIGUSR2 to the first: it
writes the counter it sees and the SHA-256 of the rest of the mapping (a
pattern written before the checkpoint) to OUT/read. After a restore, the
first sees what the second wrote only if both map one file again.
"""
import hashlib
import mmap
import os
import signal
import subprocess
import sys
import time

SIZE = 8 << 20


def atomic_write(path, text):
    with open(path + ".tmp", "w") as f:
        f.write(text)
    os.rename(path + ".tmp", path)


def counter(m):
    return int.from_bytes(m[0:8], "little")


def second(path, out):
    fd = os.open(path, os.O_RDWR)
    m = mmap.mmap(fd, SIZE, mmap.MAP_SHARED)
    os.close(fd)

    def bump(*_):
        m[0:8] = (counter(m) + 1).to_bytes(8, "little")
        atomic_write(os.path.join(out, "wrote"), str(counter(m)))

    signal.signal(signal.SIGUSR1, bump)
    atomic_write(os.path.join(out, "second-ready"), str(os.getpid()))
    while True:
        signal.pause()


def first(out):
    path = f"/dev/shm/rekindle-shmshare-{os.getpid()}"
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o600)
    os.ftruncate(fd, SIZE)
    m = mmap.mmap(fd, SIZE, mmap.MAP_SHARED)
    os.close(fd)
    pattern = bytes(range(256)) * ((SIZE - 4096) // 256)
    m[4096:4096 + len(pattern)] = pattern
    child = subprocess.Popen([sys.executable, __file__, "--second", path, out],
                             stdin=subprocess.DEVNULL, close_fds=True)
    ready = os.path.join(out, "second-ready")
    while not os.path.exists(ready):
        time.sleep(0.01)
    os.unlink(path)

    def report(*_):
        atomic_write(os.path.join(out, "read"),
                     f"{counter(m)} {hashlib.sha256(m[4096:]).hexdigest()}")

    signal.signal(signal.SIGUSR2, report)
    atomic_write(os.path.join(out, "ready"), f"{os.getpid()} {child.pid}\n")
    while True:
        signal.pause()


if __name__ == "__main__":
    if sys.argv[1] == "--second":
        second(sys.argv[2], sys.argv[3])
    else:
        first(sys.argv[1])
