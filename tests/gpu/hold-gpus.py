#!/usr/bin/env python3
"""hold-gpus.py: keep every GPU's driver state up, as persistence mode does.

Without persistence mode the driver tears a GPU's state down when its last
client exits, and the next cuInit on it sets it up again (about 0.2 s on
an H100). A restore runs cuda-checkpoint several times before the restored
engine holds the GPU, and would pay that each time. Hosts provisioned by
the playbook have persistence mode on (ansible/roles/nvidia); on a host
whose settings must stay as they are, this process stands in for it: it
retains each GPU's primary context and sleeps until killed.
"""
import ctypes
import signal
import sys

cu = ctypes.CDLL("libcuda.so.1")


def check(r, what):
    if r != 0:
        sys.exit(f"hold-gpus: {what} failed: CUDA error {r}")


check(cu.cuInit(0), "cuInit")
n = ctypes.c_int()
check(cu.cuDeviceGetCount(ctypes.byref(n)), "cuDeviceGetCount")
held = []
for i in range(n.value):
    dev, ctx = ctypes.c_int(), ctypes.c_void_p()
    check(cu.cuDeviceGet(ctypes.byref(dev), i), f"cuDeviceGet({i})")
    check(cu.cuDevicePrimaryCtxRetain(ctypes.byref(ctx), dev), f"cuDevicePrimaryCtxRetain({i})")
    held.append(ctx)
print(f"hold-gpus: holding {len(held)} GPU(s)", flush=True)
signal.pause()
