#!/usr/bin/env python3
"""bench-criu-report.py RESULT.json: the table (RESULT.md) and chart
(RESULT.png) of a scripts/bench-criu.sh run: restore rate of stock CRIU and
of criu-patches/, beside the fresh-page fill floor of the same run."""
import json
import statistics
import sys


def main(path):
    r = json.load(open(path))
    gb = r["image_bytes"] / 1e9

    def rate(criu, cache):
        secs = [x["seconds"] for x in r["restores"] if x["criu"] == criu and x["cache"] == cache]
        return (statistics.median(secs), gb / statistics.median(secs)) if secs else (None, None)

    rows = {(c, k): rate(c, k) for c in ("stock", "patched") for k in ("warm", "cold")}
    f1, fn = r["floor_1_thread"]["gbps"], r["floor_all_threads"]["gbps"]
    s_warm, p_warm = rows[("stock", "warm")], rows[("patched", "warm")]
    speedup = s_warm[0] / p_warm[0]
    lines = [
        f"# CRIU restore: stock 4.2.1 vs criu-patches/ ({r['host']}, {r['cpus']} CPUs, {r['cpu']})",
        "",
        f"Images: {gb:.2f} GB of pages (memstate); dump {r['dump_seconds']:.2f} s "
        f"({gb / r['dump_seconds']:.2f} GB/s). Medians of {sum(1 for x in r['restores'] if x['criu'] == 'stock' and x['cache'] == 'warm')} warm restores each; "
        "every restore's digests matched the dump.",
        "",
        "| restore | page cache | seconds | GB/s | / floor (all threads) |",
        "|---|---|---|---|---|",
    ]
    for (c, k), (s, g) in rows.items():
        if s is not None:
            lines.append(f"| {c} | {k} | {s:.2f} | {g:.2f} | {g / fn:.2f} |")
    lines += [
        "",
        f"Floor (pread from the page cache into fresh pages): {f1:.2f} GB/s with 1 thread, "
        f"{fn:.2f} GB/s with {r['floor_all_threads']['threads']}.",
        "",
        f"Patched / stock, warm: **{speedup:.2f}x** faster; patched restores at "
        f"**{p_warm[1]:.2f} GB/s** ({p_warm[1] / fn:.0%} of the all-thread floor).",
    ]
    if r["cpus"] >= 16:
        ok = p_warm[1] >= 8 and speedup >= 4
        lines.append(f"Target on a 16-core box (>= 8 GB/s and >= 4x stock): {'met' if ok else 'not met'}.")
    else:
        lines.append(f"Target on a small box (not slower than stock): {'met' if speedup >= 0.95 else 'not met'}.")
    md = path[:-5] + ".md"
    open(md, "w").write("\n".join(lines) + "\n")

    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    labels, vals, colors = [], [], []
    for (c, k), (s, g) in rows.items():
        if g is not None:
            labels.append(f"{c}\n{k}")
            vals.append(g)
            colors.append("#999999" if c == "stock" else "#d95f02")
    labels += ["floor\n1 thread", f"floor\n{r['floor_all_threads']['threads']} threads"]
    vals += [f1, fn]
    colors += ["#1b9e77", "#1b9e77"]
    fig, ax = plt.subplots(figsize=(7, 3.6))
    ax.bar(labels, vals, color=colors)
    for i, v in enumerate(vals):
        ax.text(i, v, f"{v:.1f}", ha="center", va="bottom", fontsize=8)
    ax.set_ylabel("GB/s (pages restored per second)")
    ax.set_title(f"CRIU restore of {gb:.1f} GB, {r['cpus']} CPUs")
    fig.tight_layout()
    fig.savefig(path[:-5] + ".png", dpi=110)


if __name__ == "__main__":
    main(sys.argv[1])
