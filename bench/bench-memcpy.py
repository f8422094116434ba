"""bench-memcpy.py [MiB]: memcpy bandwidth for bench/bench.sh where gcc is
missing (bench-memcpy.c otherwise): Python's memmove (bytearray slice
assignment), single-threaded. "warm": into a buffer already faulted in;
"fresh": into new pages (calloc), page faults included. One JSON object."""
import json, statistics, sys, time
n = int(sys.argv[1] if len(sys.argv) > 1 else 1024) << 20
src, dst = bytearray(b"\xa5") * n, bytearray(b"\x5a") * n
warm, fresh = [], []
for _ in range(5):
    t = time.perf_counter(); dst[:] = src; warm.append(n / (time.perf_counter() - t) / 1e9)
    f = bytearray(n)  # calloc: new, untouched pages
    t = time.perf_counter(); f[:] = src; fresh.append(n / (time.perf_counter() - t) / 1e9)
    del f
print(json.dumps({"method": "python bytearray copy", "bytes": n,
                  "warm_gbps": round(statistics.median(warm), 3), "warm_best_gbps": round(max(warm), 3),
                  "fresh_gbps": round(statistics.median(fresh), 3), "fresh_best_gbps": round(max(fresh), 3)}))
