#!/usr/bin/env python3
"""bench-fleet-report.py RESULTS.json: the table of fleet/bench-fleet.sh's runs.

Per run: each node's seconds from the common start to its restored engine's
first answer, the slowest node against one node's time by the same way of
pulling (the target: within 1.5x), and the bytes the origin registry sent
against the bytes it holds (the target: each blob about once, whatever N).
"""
import json
import sys


def main(path):
    res = json.load(open(path))
    image = res["image_bytes"]
    one = {r["mode"]: max(x["seconds"] for x in r["nodes"]) for r in res["runs"]
           if r["n"] == 1 and all("seconds" in x for x in r["nodes"])}
    print(f"origin registry egress {res['rate']}; it holds {image / 1e6:.1f} MB (base image and checkpoint)")
    print(f"{'pull':<16} {'N':>2}  {'each node to its first answer (s)':<40} {'slowest':>8} {'vs N=1':>7}  "
          f"{'origin MB':>9} {'x image':>7} {'max sends/blob':>14}")
    for r in res["runs"]:
        errs = [x for x in r["nodes"] if "seconds" not in x]
        secs = [x["seconds"] for x in r["nodes"] if "seconds" in x]
        each = " ".join(f"{s:.1f}" for s in secs) + (f" ({len(errs)} failed)" if errs else "")
        wrong = [x["node"] for x in r["nodes"] if x.get("same_answer") is False]
        if wrong:
            each += f" (other answer: node {wrong})"
        slowest = max(secs) if secs else float("nan")
        ratio = slowest / one[r["mode"]] if r["mode"] in one and secs else float("nan")
        sends = max(r["blob_fetches"].values()) if r["blob_fetches"] else 0
        print(f"{r['mode']:<16} {r['n']:>2}  {each:<40} {slowest:>8.1f} {ratio:>6.2f}x  "
              f"{r['origin_bytes'] / 1e6:>9.1f} {r['origin_bytes'] / image:>6.2f}x {sends:>14}"
              + (f"  (preheat {r['preheat_s']:.1f} s before)" if r.get("preheat_s") is not None else ""))
        for x in errs:
            print(f"        node {x['node']} failed: {x['error']}")


if __name__ == "__main__":
    main(sys.argv[1])
