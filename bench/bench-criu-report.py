#!/usr/bin/env python3
"""bench-criu-report.py RESULT.json: the table (RESULT.md) and chart
(RESULT.png) of a bench/bench-criu.sh run: for each shape of process tree,
the restore time of stock CRIU and of criu-patches/ (and of another CRIU,
such as upstream 4.3, where the run had one), warm and cold, side by side,
beside the floors of the same run."""
import json
import re
import statistics
import sys

VARIANTS = ("stock", "patched", "upstream")


def main(path):
    r = json.load(open(path))
    shapes = r["shapes"]
    variants = [v for v in VARIANTS if any(x["criu"] == v for x in r["restores"])]

    def secs(shape, criu, cache):
        s = [x["seconds"] for x in r["restores"] if x["shape"] == shape and x["criu"] == criu and x["cache"] == cache]
        return statistics.median(s) if s else None

    f1, fn, fc = r["floor_1_thread"], r["floor_all_threads"], r["floor_cold_direct"]

    def count(cache):
        return sum(1 for x in r["restores"] if x["shape"] == shapes[0]["shape"] and x["criu"] == "stock" and x["cache"] == cache)

    lines = [
        f"# CRIU restore: stock 4.2.1 vs criu-patches/ ({r['host']}, {r['cpus']} CPUs, {r['cpu']})",
        "",
        f"Shapes of {r['size_gib']} GiB each (tests/criu/memstate; {r['shared_mib_each']} MiB each of memfd and "
        f"shared memory besides). Seconds are medians of {count('warm')} warm restores each and of {count('cold')} "
        "cold ones (page cache dropped), in alternating order; every restore's digests, per process and region, "
        "matched the dump, and COW pages were shared as before.",
        "",
    ]
    head = ["shape", "procs", "GB"]
    for k in ("warm", "cold"):
        head += [f"{v} {k} s" for v in variants] + [f"patched/stock {k}"]
    lines += ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    verdict = []
    for sh in shapes:
        name, gb = sh["shape"], sh["image_bytes"] / 1e9
        row = [name, str(sh["processes"]), f"{gb:.2f}"]
        for k in ("warm", "cold"):
            t = {v: secs(name, v, k) for v in variants}
            row += [f"{t[v]:.2f}" if t[v] is not None else "-" for v in variants]
            if t["stock"] and t["patched"]:
                ratio = t["stock"] / t["patched"]
                row.append(f"**{ratio:.2f}x**")
                verdict.append((name, k, ratio))
            else:
                row.append("-")
        lines.append("| " + " | ".join(row) + " |")

    def fills(sh):
        got = [re.match(r"Filling (\d+) MiB of (premapped private|private|shared) memory.* with (\d+) (\w+)(?:, reading \S+ (with O_DIRECT|through the page cache)[^,]*)?(, comparing \S+ through the page cache)?", f) for f in sh.get("parallel_fills", [])]
        return ", ".join(f"{m[1]} MiB {m[2]} by {m[3]} {m[4]}" + (f" {m[5]}" if m[5] else "") + (" (compared through the page cache)" if m[6] else "") for m in got if m) or "none"

    def shape_floor(shape):
        """The median of the shape's cold floors, GB/s (None before they were measured)."""
        got = [f["bytes"] / f["seconds"] / 1e9 for f in r.get("cold_floors", []) if f["shape"] == shape and f["seconds"] > 0]
        return (statistics.median(got), len(got), min(got), max(got)) if got else None

    def cold_vs_floor():
        out = []
        for sh in shapes:
            t = {v: secs(sh["shape"], v, "cold") for v in variants}
            floor = shape_floor(sh["shape"])
            if not floor or not any(t.values()):
                continue
            fg, n, lo, hi = floor
            parts = [f"{v} {sh['image_bytes'] / t[v] / 1e9:.2f} GB/s ({sh['image_bytes'] / t[v] / 1e9 / fg:.0%})" for v in variants if t[v]]
            out.append(f"{sh['shape']}: floor {fg:.2f} GB/s (median of {n}, {lo:.2f}-{hi:.2f}), " + ", ".join(parts))
        return out

    lines += [
        "",
        "patched/stock is stock's time over patched's: above 1 patched is faster. What the patched restore "
        "gave to helpers and how they read the images (its -v3 log, one more restore, cold where the run has "
        "cold ones): "
        + "; ".join(f"{sh['shape']}: {fills(sh)}" for sh in shapes)
        + ". The rest it filled serially, as stock does.",
        "",
        f"Floors ({f1['bytes'] / 1e9:.2f} GB pages image of the first shape, pread into fresh pages): "
        f"{f1['gbps']:.2f} GB/s with 1 thread and {fn['gbps']:.2f} GB/s with {fn['threads']} from the page cache; "
        f"{fc['gbps']:.2f} GB/s with {fc['threads']} from a cold disk with O_DIRECT.",
        "",
    ]
    vs_floor = cold_vs_floor()
    if vs_floor:
        lines += [
            "Cold restores against each shape's own cold floor (all its pages images read at once, each by "
            f"{r['cpus']} threads "
            + ("with O_DIRECT" if all(f.get("direct") for f in r["cold_floors"]) else "through the page cache where the file system takes no O_DIRECT")
            + ", after every round of cold restores; the median of those) as pages "
            "images' bytes over the whole restore's median seconds, process creation and all: "
            + "; ".join(vs_floor) + ".",
            "",
        ]
    low = []
    for sh in shapes:
        t, floor = secs(sh["shape"], "patched", "cold"), shape_floor(sh["shape"])
        if t and floor and sh["image_bytes"] / t / 1e9 < 0.9 * floor[0]:
            low.append(f"{sh['shape']} ({sh['image_bytes'] / t / 1e9 / floor[0]:.0%})")
    if vs_floor:
        lines.append("Patched cold restores at >= 90% of their shape's floor: " + ("met." if not low else "not met: " + ", ".join(low) + "."))
        lines.append("")
    slow = [f"{n} {k} ({x:.2f}x)" for n, k, x in verdict if x < 0.95]
    lines.append(
        "Never slower than stock (patched/stock >= 0.95 in every shape, warm and cold): "
        + ("met." if not slow else "not met: " + ", ".join(slow) + ".")
    )
    md = path[:-5] + ".md"
    open(md, "w").write("\n".join(lines) + "\n")

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    colors = {"stock": "#999999", "patched": "#d95f02", "upstream": "#7570b3"}
    groups = [(sh["shape"], k) for sh in shapes for k in ("warm", "cold")]
    width = 0.8 / len(variants)
    fig, ax = plt.subplots(figsize=(max(7, 1.4 * len(groups)), 3.8))
    for i, v in enumerate(variants):
        xs, ys = [], []
        for j, (n, k) in enumerate(groups):
            t = secs(n, v, k)
            if t is not None:
                xs.append(j + (i - (len(variants) - 1) / 2) * width)
                ys.append(t)
        ax.bar(xs, ys, width, color=colors[v], label=v)
        for x, y in zip(xs, ys):
            ax.text(x, y, f"{y:.1f}", ha="center", va="bottom", fontsize=7)
    ax.set_xticks(range(len(groups)))
    ax.set_xticklabels([f"{n}\n{k}" for n, k in groups])
    ax.set_ylabel("restore seconds (lower is better)")
    ax.set_title(f"CRIU restore, shapes of {r['size_gib']} GiB, {r['cpus']} CPUs")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path[:-5] + ".png", dpi=110)


if __name__ == "__main__":
    main(sys.argv[1])
