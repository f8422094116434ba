"""weights_check.py SET_DIR GB: the measures of tests/gpu/weights-check.sh, in
one process on GPU 0 (run it through that script, which makes the set).

Pinned H2D floor (torch pinned tensor -> GPU), then the GPU reference engine
(images/gpu-engine/server.py, no memory saver, no CUDA graph) started on the
set: register seconds, then reloads through the engine's own paths: from the
registered set (Model.reload_weights) and from the file (Model.load_weights,
pinned bounce buffers), each GPU-checksummed; then copy_into by stream count.
Prints a table; writes JSON to $OUT/weights-check.json when OUT is set.
"""

import json
import os
import statistics
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path[:0] = [os.path.join(ROOT, "images", "gpu-engine"), os.path.join(ROOT, "images", "weights")]
import server  # noqa: E402
import rekindle_weights as rw  # noqa: E402

REPS = 5


def meminfo(key):
    with open("/proc/meminfo") as f:
        for line in f:
            if line.startswith(key + ":"):
                return int(line.split()[1]) * 1024
    return 0


def pinned_floor(torch, n=2 << 30, runs=7):
    src = torch.empty(n, dtype=torch.uint8).pin_memory()
    src.fill_(7)
    dst = torch.empty(n, dtype=torch.uint8, device="cuda")
    dst.copy_(src, non_blocking=True)
    torch.cuda.synchronize()
    out = []
    for _ in range(runs):
        t = time.perf_counter()
        dst.copy_(src, non_blocking=True)
        torch.cuda.synchronize()
        out.append(n / (time.perf_counter() - t) / 1e9)
    del src, dst
    torch.cuda.empty_cache()
    if hasattr(torch._C, "_host_emptyCache"):
        torch._C._host_emptyCache()
    return statistics.median(out), max(out)


def main(set_dir, gb):
    t_all = time.time()
    import torch
    dev = torch.cuda.get_device_name(0)
    floor, floor_best = pinned_floor(torch)

    env = {"ENGINE_PARAMS_GB": str(gb), "ENGINE_KV_GB": "0.1", "ENGINE_CONTEXT_LEN": "256"}
    os.environ.update(env)
    cfg = server.model_config(env)
    ws = rw.open_set(set_dir)
    path = os.path.join(set_dir, ws.files[0])  # the file path reads the same bytes, by pread
    huge0 = meminfo("ShmemHugePages")
    phases = {}
    t = time.time()
    m = server.Model(cfg, path, False, False, phases, set_dir=set_dir)
    start_s = time.time() - t
    if phases.get("weights_source") != "weight-set":
        sys.exit(f"weights-check: the engine did not take the set: {m.wset_reason}")

    def runs(fn):
        out = [fn() for _ in range(REPS)]
        return {k: statistics.median(o[k] for o in out) for k in out[0]}

    def from_set():
        got, st = m.reload_weights()
        assert st["weights_source"] == "weight-set" and got == m.expected_checksum, st
        return {"copy_gbps": st["weights_copy_gbps"], "reload_gbps": st["weights_reload_gbps"],
                "copy_s": st["weights_copy_s"], "checksum_s": st["weights_checksum_s"]}

    def from_file():
        t = time.time()
        got = m.load_weights()
        total = time.time() - t
        assert got == m.expected_checksum
        copy = total - m.checksum_seconds
        return {"copy_gbps": cfg["weights_bytes"] / 1e9 / copy, "reload_gbps": cfg["weights_bytes"] / 1e9 / total,
                "copy_s": copy, "checksum_s": m.checksum_seconds}

    setr, filer = runs(from_set), runs(from_file)
    names = [n for n, _ in server.param_shapes(cfg)]
    streams = {}
    for k in (1, 2, 4, 8):
        gbps = []
        for _ in range(3):
            n, secs = m.wset.copy_into({x: m.w[x] for x in names}, streams=k)
            gbps.append(n / 1e9 / secs)
        streams[k] = round(statistics.median(gbps), 2)
    m.load_weights()  # the checksum still holds after the sweep
    res = {
        "device": dev, "weights_bytes": cfg["weights_bytes"], "model_id": cfg["model_id"],
        "set_dir": set_dir, "shmem_huge_pages_bytes": meminfo("ShmemHugePages"), "shmem_huge_before": huge0,
        "pinned_h2d_gbps": round(floor, 2), "pinned_h2d_best_gbps": round(floor_best, 2),
        "register_s": phases.get("weights_set_register_s"),
        "read_only_registration": m.wset.read_only_registration,
        "engine_start_s": round(start_s, 3), "engine_phases": phases,
        "set": {k: round(v, 3) for k, v in setr.items()},
        "file": {k: round(v, 3) for k, v in filer.items()},
        "set_copy_vs_floor": round(setr["copy_gbps"] / floor, 3),
        "set_reload_vs_floor": round(setr["reload_gbps"] / floor, 3),
        "file_copy_vs_floor": round(filer["copy_gbps"] / floor, 3),
        "copy_into_gbps_by_streams": streams, "default_streams": server.SET_STREAMS,
        "reps": REPS, "torch": torch.__version__, "seconds": round(time.time() - t_all, 1),
    }
    gbs = cfg["weights_bytes"] / 1e9
    print(f"weights check: {dev}, {gbs:.2f} GB ({cfg['model_id']}), set on tmpfs huge=within_size "
          f"({res['shmem_huge_pages_bytes'] / 1e9:.2f} GB in huge pages)")
    rows = [
        ("pinned H2D floor (torch pinned -> GPU, 2 GiB)", f"{floor:6.2f} GB/s", f"best {floor_best:.2f}"),
        ("register the set (cudaHostRegister, once)", f"{res['register_s']:6.3f} s",
         "read-only" if res["read_only_registration"] else "flags 0"),
        ("reload from the weight set: copy", f"{setr['copy_gbps']:6.2f} GB/s",
         f"{100 * res['set_copy_vs_floor']:.0f}% of floor"),
        ("reload from the weight set: with checksum", f"{setr['reload_gbps']:6.2f} GB/s",
         f"{100 * res['set_reload_vs_floor']:.0f}% of floor (checksum {setr['checksum_s']:.3f} s)"),
        ("reload from the file (pinned ring): copy", f"{filer['copy_gbps']:6.2f} GB/s",
         f"{100 * res['file_copy_vs_floor']:.0f}% of floor"),
        ("reload from the file: with checksum", f"{filer['reload_gbps']:6.2f} GB/s", ""),
        ("copy_into by streams", " ".join(f"{k}:{v}" for k, v in streams.items()), "GB/s"),
    ]
    for a, b, c in rows:
        print(f"  {a:<46} {b:>14}  {c}")
    print(f"  median of {REPS}; {res['seconds']} s in all")
    out = os.environ.get("OUT")
    if out:
        os.makedirs(out, exist_ok=True)
        with open(os.path.join(out, "weights-check.json"), "w") as f:
            json.dump(res, f, indent=1)
    return 0


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    sys.exit(main(sys.argv[1], float(sys.argv[2])))
