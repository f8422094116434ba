#!/usr/bin/python3
"""bench-report.py RESULT.json [--png CHART.png] [--markdown TABLE.md]
   bench-report.py --runs bench/results.json --page docs/benchmarks.md --svg docs/results.svg [--check]

Reads the raw result that bench/bench.sh (or gpu-bench.sh) wrote, derives
each run's phases, the medians and spread over the repetitions, the floors
set by the bandwidths measured in the same run and the ratios against
Rekindle's targets; writes them back into RESULT.json ("summary"), and
optionally a timeline chart (one horizontal bar per path, phases stacked;
needs matplotlib) and a markdown table.

Phases of a run, in seconds from the `nerdctl run` call (t0):
  cold     container start (t0 -> engine process start), engine load (-> /health
           200; the GPU engine's own cold-start phases when it reports them),
           first token (-> first /generate answer)
  restore  nerdctl: unpack, create (t0 -> containerd begins the restore, its
           "restoring instead of starting" line), container setup, task create
           and CRIU restore (its "restored from checkpoint image" line), start,
           network (-> the wake helper woke), wake + resume (/.rekindle/status
           woke_at -> done_at), first token (-> first /generate answer)

With --runs: the results page instead (results_page.py): the table of the
newest run of each engine and size into the page, between its markers, and
the chart of their times to the first token; --check changes nothing and
fails when either differs from what it would write (make test-bench-page).

With "replicas" in the result (BENCH_REPLICAS > 1): N replicas restored at
once against one, first and cached, each replica's phases as a restore's
(t0 is its batch's start), beside one replica's floors from the same run;
in summary.replicas and a table of their own.
"""

import argparse
import datetime
import json
import re
import statistics
import sys

PATHS = ("cold", "first", "cached", "preheated")
LABELS = {"cold": "cold start", "first": "first restore (cache cold)", "cached": "cached restore",
          "preheated": "preheated restore (page cache dropped)",
          "floor-first": "floor, first restore", "floor-cached": "floor, cached restore"}
TARGETS = {
    "cached_setup_s": 0.3,          # cached container-setup <= 0.3 s
    "setup_speedup": 10.0,          # first / cached container-setup >= 10x
    "host_state_gbps": 5.0,         # pages bytes / criu-restore >= 5 GB/s
    "restore_vs_floor": 1.5,        # cached restore-to-first-token / floor <= 1.5x
    "cold_vs_restore": 20.0,        # cold start / cached restore-to-first-token >= 20x
}
GB = 1e9


def ts(s):
    """RFC 3339 (Go's time.Time JSON, nanoseconds) -> epoch seconds."""
    m = re.match(r"(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d)(\.\d+)?(Z|[+-]\d\d:\d\d)$", s)
    if not m:
        raise ValueError(f"not an RFC 3339 time: {s}")
    base = datetime.datetime.fromisoformat(m.group(1) + (m.group(3).replace("Z", "+00:00")))
    return base.timestamp() + float(m.group(2) or 0)


def phases_of(run, engine):
    """[(name, seconds)] in order, and the total."""
    t0, total = run["t0"], run["t_answer"] - run["t0"]
    st = run.get("state") or {}
    if run["path"] == "cold":
        start = st.get("start_time") or t0
        out = [("container start", max(start - t0, 0.0))]
        load = max(run["t_health"] - start, 0.0)
        cs = st.get("cold_start") or {}
        named = [(k[:-2].replace("_", " "), float(v)) for k, v in cs.items()
                 if k.endswith("_s") and k not in ("total_s", "python_start_s") and isinstance(v, (int, float))]
        if named:
            out += [("engine: " + k, v) for k, v in named]
            out.append(("engine: other", max(load - sum(v for _, v in named), 0.0)))
        else:
            out.append(("engine load", load))
        out.append(("first token", run["t_answer"] - run["t_health"]))
        return out, total
    s, c = run.get("status") or {}, run.get("containerd") or {}
    woke, done = ts(s["woke_at"]), ts(s["done_at"])
    setup, create, criu = c.get("container-setup", 0.0), c.get("task-create", 0.0), c.get("criu-restore", 0.0)
    before = ts(run["restore_begun_at"]) - t0 if run.get("restore_begun_at") else 0.0
    out = [("nerdctl: unpack, create", max(before, 0.0)), ("container setup", setup)]
    if "task-create" in c:
        out.append(("task create", create))
    # cuda-checkpoint's timed steps (GPU): part of CRIU restore, shown apart.
    cuda = min(sum(v for v in (run.get("cuda") or {}).values() if isinstance(v, (int, float))), criu)
    out += [("CRIU restore", criu - cuda)] + ([("CUDA restore", cuda)] if cuda else []) + [
            ("start, network", max(woke - t0 - max(before, 0.0) - setup - create - criu, 0.0)),
            ("wake + resume", done - woke),
            ("first token", max(run["t_answer"] - done, 0.0))]
    return out, total


def stats(xs):
    xs = sorted(x for x in xs if x is not None)
    if not xs:
        return None
    q = statistics.quantiles(xs, n=4, method="inclusive") if len(xs) > 1 else [xs[0]] * 3
    return {"median": statistics.median(xs), "min": xs[0], "max": xs[-1], "q1": q[0], "q3": q[2], "n": len(xs)}


def med(d, *keys):
    for k in keys:
        if d is None:
            return None
        d = d.get(k)
    return d


def summarize(r):
    engine = r["engine"]
    per_path = {p: [] for p in PATHS}
    for run in r["runs"]:
        ph, total = phases_of(run, engine)
        run["phases"], run["total_s"] = [{"name": k, "seconds": round(v, 4)} for k, v in ph], round(total, 4)
        per_path[run["path"]].append(run)

    paths = {}
    for p, runs in per_path.items():
        if not runs:
            continue
        names = []
        for run in runs:
            names += [x["name"] for x in run["phases"] if x["name"] not in names]
        paths[p] = {
            "total_s": stats([run["total_s"] for run in runs]),
            "nerdctl_run_s": stats([run["t_run_returned"] - run["t0"] for run in runs]),
            "phases": {k: stats([next((x["seconds"] for x in run["phases"] if x["name"] == k), 0.0) for run in runs])
                       for k in names},
            "cache": sorted({run.get("cache") for run in runs if run.get("cache")}),
        }
        if p != "cold":
            for key in ("container-setup", "task-create", "criu-restore", "total"):
                v = [run["containerd"].get(key) for run in runs if run.get("containerd")]
                if any(x is not None for x in v):
                    paths[p]["containerd_" + key.replace("-", "_") + "_s"] = stats(v)

    # Bandwidths and floors, per repetition, then their spread.
    bw = r.get("bandwidth") or []
    by_rep = {b["rep"]: b for b in bw}
    cached_by_rep = {run["rep"]: run for run in per_path["cached"]}
    first_by_rep = {run["rep"]: run for run in per_path["first"]}
    cold_by_rep = {run["rep"]: run for run in per_path["cold"]}
    rows = []
    for rep, b in sorted(by_rep.items()):
        mem = med(b, "memcpy", "warm_gbps")
        fresh = med(b, "memcpy", "fresh_gbps")
        disk = med(b, "disk_read", "gbps")
        dwrite = med(b, "disk_write", "gbps")
        h2d = med(b, "h2d", "pinned_gbps")
        pages = b.get("pages_bytes")
        layer = b.get("layer_bytes") or pages
        cr, fr, co = cached_by_rep.get(rep), first_by_rep.get(rep), cold_by_rep.get(rep)
        st = (cr or {}).get("state") or {}
        wbytes = st.get("weights_bytes") or med(st, "config", "weights_bytes") or 0
        # Weights come back from the page cache (cached) or the disk (first),
        # then, on a GPU, over PCIe: the slower link bounds them.
        w_cached = wbytes / (min(h2d, mem) if h2d else mem) / GB if mem else None
        w_first = wbytes / (min(h2d, disk) if h2d else disk) / GB if disk else None
        row = {
            "rep": rep, "pages_bytes": pages, "layer_bytes": layer, "weights_bytes": wbytes,
            "memcpy_gbps": mem, "memcpy_fresh_gbps": fresh, "disk_read_gbps": disk, "h2d_pinned_gbps": h2d,
            "disk_write_gbps": dwrite,
            "floor_cached_s": (pages / mem / GB + w_cached) if mem and pages else None,
            "floor_first_s": (layer / disk / GB + w_first) if disk and layer else None,
            # The same with memcpy into fresh pages: a restore fills memory it
            # has just mapped, so page faults are part of its floor.
            "floor_cached_fresh_s": (pages / fresh / GB + w_cached) if fresh and pages and w_cached is not None else None,
            "floor_cached_parts": {"host state at memcpy": pages / mem / GB if mem and pages else None,
                                   "weights reload": w_cached},
            "floor_first_parts": {"checkpoint read from disk": layer / disk / GB if disk and layer else None,
                                  "weights reload": w_first},
        }
        if cr:
            c = cr.get("containerd") or {}
            row["cached_setup_s"] = c.get("container-setup")
            row["cached_criu_s"] = c.get("criu-restore")
            row["host_state_gbps"] = pages / c["criu-restore"] / GB if c.get("criu-restore") and pages else None
            row["cached_total_s"] = cr["total_s"]
            row["restore_vs_floor"] = cr["total_s"] / row["floor_cached_s"] if row["floor_cached_s"] else None
            if row["floor_cached_fresh_s"]:
                row["restore_vs_fresh_floor"] = cr["total_s"] / row["floor_cached_fresh_s"]
                row["criu_vs_fresh_memcpy"] = (c["criu-restore"] / (pages / fresh / GB)
                                               if c.get("criu-restore") and fresh and pages else None)
            if co:
                row["cold_vs_restore"] = co["total_s"] / cr["total_s"]
            if fr:
                fc = (fr.get("containerd") or {}).get("container-setup")
                row["setup_speedup"] = fc / c["container-setup"] if fc and c.get("container-setup") else None
                row["first_host_state_gbps"] = (pages / fr["containerd"]["criu-restore"] / GB
                                                if (fr.get("containerd") or {}).get("criu-restore") and pages else None)
                row["first_vs_floor"] = fr["total_s"] / row["floor_first_s"] if row["floor_first_s"] else None
                # The first restore's unpack (nerdctl: unpack, create) reads the
                # layer once; against the cold read of the same bytes.
                unpack = next((x["seconds"] for x in fr["phases"] if x["name"] == "nerdctl: unpack, create"), None)
                if unpack and layer:
                    row["unpack_s"] = unpack
                    row["unpack_gbps"] = layer / unpack / GB
                    if disk:
                        row["unpack_vs_disk_read"] = row["unpack_gbps"] / disk
                # Issue 13: a first restore within cached + layer / cold read + 1 s.
                if disk and layer:
                    row["first_target_s"] = cr["total_s"] + layer / disk / GB + 1
                    row["first_vs_target"] = fr["total_s"] / row["first_target_s"]
            last = st.get("last_resume") or {}
            if last.get("weights_reload_s"):
                row["weights_reload_s"] = last["weights_reload_s"]
                row["weights_reload_gbps"] = wbytes / last["weights_reload_s"] / GB
                if h2d:
                    row["weights_reload_vs_h2d"] = row["weights_reload_gbps"] / h2d
        ck = next((c for c in r.get("checkpoints") or [] if c.get("rep") == rep), None)
        pk = next((ph["seconds"] for ph in (ck or {}).get("phases") or [] if ph["name"] == "package"), None)
        if pk and ck.get("size"):
            # A compressed layer is smaller than what was packaged: count
            # the checkpoint's pages then.
            row["package_gbps"] = max(ck["size"], pages or 0) / pk / GB
            if dwrite:
                row["package_vs_direct_write"] = row["package_gbps"] / dwrite
        rows.append(row)

    def spread(key):
        return stats([row.get(key) for row in rows])

    floors = {k: spread(k) for k in ("pages_bytes", "layer_bytes", "weights_bytes", "memcpy_gbps",
                                     "memcpy_fresh_gbps", "disk_read_gbps", "h2d_pinned_gbps",
                                     "floor_cached_s", "floor_cached_fresh_s", "floor_first_s")}
    floors["floor_cached_parts"] = {k: stats([row["floor_cached_parts"][k] for row in rows])
                                    for k in ("host state at memcpy", "weights reload")}
    floors["floor_first_parts"] = {k: stats([row["floor_first_parts"][k] for row in rows])
                                   for k in ("checkpoint read from disk", "weights reload")}
    floors["restore_vs_fresh_floor"] = spread("restore_vs_fresh_floor")
    for k in ("disk_write_gbps", "package_gbps", "package_vs_direct_write", "first_target_s", "first_vs_target",
              "unpack_s", "unpack_gbps", "unpack_vs_disk_read"):
        floors[k] = spread(k)
    floors["criu_vs_fresh_memcpy"] = spread("criu_vs_fresh_memcpy")
    floors["weights_reload_gbps"] = spread("weights_reload_gbps")
    floors["weights_reload_vs_h2d"] = spread("weights_reload_vs_h2d")

    measured = {k: spread(k) for k in TARGETS}
    targets = {}
    for k, goal in TARGETS.items():
        m = med(measured, k, "median")
        upper = k in ("cached_setup_s", "restore_vs_floor")
        targets[k] = {"goal": goal, "kind": "<=" if upper else ">=", "median": m,
                      "min": med(measured, k, "min"), "max": med(measured, k, "max"),
                      "met": None if m is None else (m <= goal if upper else m >= goal)}
    ck = {}
    for c in r.get("checkpoints") or []:
        for p in c.get("phases") or []:
            ck.setdefault(p["name"], []).append(p["seconds"])
    r["summary"] = {
        "paths": paths, "floors": floors, "per_rep": rows, "targets": targets,
        "checkpoint": {"phases": {k: stats(v) for k, v in ck.items()},
                       "size_bytes": stats([c.get("size") for c in r.get("checkpoints") or []])},
    }
    if r.get("replicas"):
        r["summary"]["replicas"] = summarize_replicas(r["replicas"], floors)
    return r


REPLICA_PATHS = ("one-first", "all-first", "one-cached", "all-cached")


def summarize_replicas(rp, floors):
    """N at once against one: the ratios and whether they meet the target,
    one replica's floors (from the rows), and each batch's phases: median
    and max over its replicas, so that a phase that grows with N (what the
    replicas share) shows."""
    out = {k: rp.get(k) for k in ("n", "devices", "first_one_s", "cached_one_s", "first_all_s", "cached_all_s",
                                  "ratio_first", "ratio_cached", "target_ratio", "error")}
    goal = rp.get("target_ratio") or 1.5
    for k in ("ratio_first", "ratio_cached"):
        out[k.replace("ratio", "met")] = None if rp.get(k) is None else rp[k] <= goal
    for k, fk in (("first", "floor_first_s"), ("cached", "floor_cached_s")):
        fl = med(floors, fk, "median")
        out[fk] = fl
        all_s = rp.get(f"{k}_all_s")
        out[f"{k}_all_vs_floor"] = all_s / fl if all_s and fl else None
    phases = {}
    for p in REPLICA_PATHS:
        runs = [run for run in rp.get("runs") or [] if run.get("path") == p]
        per = {}
        for run in runs:
            try:
                ph, total = phases_of(run, "replica")
            except (KeyError, TypeError, ValueError):
                continue
            for name, v in ph + [("to first answer", total)]:
                per.setdefault(name, []).append(v)
        phases[p] = {name: stats(v) for name, v in per.items()}
    out["phases"] = phases
    return out


# ---- output ---------------------------------------------------------------------

def fmt(x, unit="s", nd=2):
    return "n/a" if x is None else f"{x:.{nd}f}{unit}"


def cell(s, unit="s", nd=2):
    if not s:
        return "n/a"
    return f"{s['median']:.{nd}f}{unit} ({s['min']:.{nd}f}–{s['max']:.{nd}f})"


def markdown(r):
    s = r["summary"]
    h = r["host"]
    out = [f"Engine: **{r['engine']}**, {r['config']['reps']} repetitions, started {r['started']} on "
           f"{h.get('nproc')} × {h.get('cpu_model')}, kernel {h.get('kernel')}"
           + (f", ENGINE_STATE_MB={r['config']['state_mb']}" if r["config"].get("state_mb") else "")
           + f"; page cache dropped before cold start and first restore: {'yes' if r['config'].get('drop_caches') else 'no'}.",
           "", "Median (min–max) seconds from `nerdctl run` to the first `/generate` answer, and the phases:", ""]
    names = []
    for p in PATHS:
        for k in (s["paths"].get(p) or {}).get("phases", {}):
            if k not in names:
                names.append(k)
    out.append("| path | to first token | " + " | ".join(names) + " |")
    out.append("|---|---|" + "---|" * len(names))
    for p in PATHS:
        ps = s["paths"].get(p)
        if not ps:
            continue
        row = [LABELS[p], "**" + cell(ps["total_s"]) + "**"]
        for k in names:
            st = ps["phases"].get(k)
            row.append(fmt(st["median"]) if st else "—")
        out.append("| " + " | ".join(row) + " |")
    f = s["floors"]
    out += ["", "Floors from bandwidths measured in the same run (median, min–max):", "",
            "| measure | value |", "|---|---|",
            f"| checkpoint pages (CRIU `pages-*.img`) | {cell(f['pages_bytes'] and {k: v / 1e6 for k, v in f['pages_bytes'].items() if k != 'n'}, ' MB', 0)} |",
            f"| memcpy, warm destination | {cell(f['memcpy_gbps'], ' GB/s')} |",
            f"| memcpy, into fresh pages (faults included) | {cell(f['memcpy_fresh_gbps'], ' GB/s')} |",
            f"| disk read of the pages (of the layer's blob when read in place), page cache dropped | {cell(f['disk_read_gbps'], ' GB/s')} |"]
    if f.get("h2d_pinned_gbps"):
        out.append(f"| pinned host-to-device copy | {cell(f['h2d_pinned_gbps'], ' GB/s')} |")
    if f.get("weights_reload_gbps"):
        out.append(f"| weights reload in the engine's resume | {cell(f['weights_reload_gbps'], ' GB/s')} |")
    out += [f"| floor, cached restore (pages / memcpy + weights reload) | {cell(f['floor_cached_s'])} |",
            f"| floor, cached restore with page faults (pages / memcpy into fresh pages + weights) | {cell(f['floor_cached_fresh_s'])} |",
            f"| floor, first restore (checkpoint layer / disk read + weights reload) | {cell(f['floor_first_s'])} |",
            "", "Against the targets (median over repetitions, min–max):", "",
            "| target | goal | measured | met |", "|---|---|---|---|"]
    desc = {"cached_setup_s": ("cached container-setup", "s"),
            "setup_speedup": ("container-setup, first / cached", "x"),
            "host_state_gbps": ("host-state restore, pages / CRIU restore (cached)", " GB/s"),
            "restore_vs_floor": ("cached restore to first token / floor", "x"),
            "cold_vs_restore": ("cold start / cached restore to first token", "x")}
    for k, t in s["targets"].items():
        d, u = desc[k]
        m = cell({"median": t["median"], "min": t["min"], "max": t["max"]}, u) if t["median"] is not None else "n/a"
        met = {True: "yes", False: "**no**", None: "n/a"}[t["met"]]
        out.append(f"| {d} | {t['kind']} {t['goal']:g}{u} | {m} | {met} |")
    if f.get("restore_vs_fresh_floor"):
        out.append(f"| cached restore to first token / floor with page faults | — | {cell(f['restore_vs_fresh_floor'], 'x')} | — |")
    if f.get("criu_vs_fresh_memcpy"):
        out.append(f"| CRIU restore / (pages / memcpy into fresh pages) | — | {cell(f['criu_vs_fresh_memcpy'], 'x')} | — |")
    if f.get("weights_reload_vs_h2d"):
        out.append(f"| weights reload / pinned H2D bandwidth | — | {cell(f['weights_reload_vs_h2d'], 'x')} | — |")
    if f.get("package_vs_direct_write") and f["package_vs_direct_write"].get("median") is not None:
        out.append(f"| packaging {cell(f['package_gbps'], ' GB/s')} / direct write {cell(f['disk_write_gbps'], ' GB/s')} | ≥ 0.5x | {cell(f['package_vs_direct_write'], 'x')} | "
                   f"{'yes' if f['package_vs_direct_write']['median'] >= 0.5 else '**no**'} |")
    if f.get("first_vs_target") and f["first_vs_target"].get("median") is not None:
        out.append(f"| first restore / (cached + layer / disk read + 1 s = {cell(f['first_target_s'])}) | ≤ 1x | {cell(f['first_vs_target'], 'x')} | "
                   f"{'yes' if f['first_vs_target']['median'] <= 1 else '**no**'} |")
    if f.get("unpack_vs_disk_read") and f["unpack_vs_disk_read"].get("median") is not None:
        out.append(f"| — of which the unpack, {cell(f['unpack_s'])} = {cell(f['unpack_gbps'], ' GB/s')} / disk read | — | {cell(f['unpack_vs_disk_read'], 'x')} | — |")
    ck = s["checkpoint"]
    if ck["phases"]:
        out += ["", "Checkpoint (`oci-checkpoint create`), median seconds: "
                + ", ".join(f"{k} {v['median']:.2f}" for k, v in ck["phases"].items())
                + (f"; image {ck['size_bytes']['median'] / 1e9:.2f} GB" if ck["size_bytes"] else "") + "."]
    if s.get("replicas"):
        out += replicas_markdown(s["replicas"])
    if r.get("pull"):
        out += pull_markdown(r["pull"])
    return "\n".join(out) + "\n"


def pull_markdown(pl):
    """BENCH_PULL=1: a second, empty containerd root pulls the checkpoint
    image from a registry on loopback and restores it."""
    if pl.get("error"):
        return ["", f"A node that has nothing was not measured: {pl['error']}"]
    ratio, goal = pl.get("ratio"), pl.get("target_ratio") or 0.2
    met = "n/a" if ratio is None else ("yes" if ratio <= goal else "**no**")
    c = pl.get("containerd") or {}
    phases = ", ".join(f"{k} {v:.2f}s" for k, v in c.items() if isinstance(v, (int, float)))
    return ["", "A node that has nothing: a second containerd root, empty, pulls the checkpoint image "
            f"({fmt((pl.get('image_bytes') or 0) / 1e9, ' GB')}) from a registry on loopback, then restores it "
            "(containerd pulls the base); the cold start is this phase's own, from the registry's engine image:", "",
            "| cold start | pull | restore to first answer | pull + restore | / cold start | goal | met |",
            "|---|---|---|---|---|---|---|",
            f"| {fmt(pl.get('cold_s'))} | {fmt(pl.get('pull_s'))} ({fmt(pl.get('pull_gbps'), ' GB/s')}) | "
            f"{fmt(pl.get('restore_s'))} | **{fmt(pl.get('total_s'))}** | {fmt(ratio, 'x')} | ≤ {goal:g}x | {met} |",
            "", f"The restore's phases (containerd): {phases or 'n/a'}; wake {fmt(pl.get('resume_s'))}."]


def replicas_markdown(rs):
    n = rs.get("n")
    if rs.get("error"):
        return ["", f"Replicas: {n} at once were not measured: {rs['error']}"]
    devs = "; ".join(",".join(d) for d in rs.get("devices") or []) or "no devices"
    out = ["", f"The host filled: {n} replicas restored at once from one checkpoint image ({devs}), against one "
           "(the last one's devices) in the same run; seconds from the first `nerdctl run` to the last replica's "
           "first answer (median over rounds). A floor is one replica's, from the rows above:", "",
           f"| restore | one replica | {n} at once | {n} at once / one | goal | met | one replica's floor | {n} at once / floor |",
           "|---|---|---|---|---|---|---|---|"]
    for k, label in (("first", "first (cache cold, page cache dropped)"), ("cached", "cached")):
        met = {True: "yes", False: "**no**", None: "n/a"}[rs.get(f"met_{k}")]
        out.append(f"| {label} | {fmt(rs.get(f'{k}_one_s'))} | **{fmt(rs.get(f'{k}_all_s'))}** | "
                   f"{fmt(rs.get(f'ratio_{k}'), 'x')} | ≤ {rs.get('target_ratio') or 1.5:g}x | {met} | "
                   f"{fmt(rs.get(f'floor_{k}_s'))} | {fmt(rs.get(f'{k}_all_vs_floor'), 'x')} |")
    ph = rs.get("phases") or {}
    names = []
    for p in REPLICA_PATHS:
        for k in ph.get(p) or {}:
            if k not in names:
                names.append(k)
    if names:
        out += ["", "Each replica's phases, seconds, median (max) over the replicas of a batch: a phase that grows "
                "from one to N is where they share something (disk, page cache, CPU cores for CRIU's fill, the "
                "driver for the CUDA restore):", "",
                "| phase | one, first | " + f"{n}, first | one, cached | {n}, cached |", "|---|---|---|---|---|"]
        for k in names:
            row = [k]
            for p in REPLICA_PATHS:
                st = (ph.get(p) or {}).get(k)
                row.append("—" if not st else (fmt(st["median"]) if st["n"] == 1 or p.startswith("one")
                                               else f"{fmt(st['median'])} ({fmt(st['max'])})"))
            out.append("| " + " | ".join(row) + " |")
    return out


COLORS = {
    "container start": "#9e9e9e", "nerdctl: unpack, create": "#9e9e9e", "start, network": "#bab0ac", "engine load": "#f28e2b",
    "container setup": "#4e79a7", "task create": "#76b7b2", "CRIU restore": "#59a14f", "CUDA restore": "#8cd17d",
    "wake + resume": "#edc948", "first token": "#e15759",
    "host state at memcpy": "#59a14f", "checkpoint read from disk": "#b07aa1", "weights reload": "#edc948",
}
EXTRA = ["#f28e2b", "#ff9da7", "#9c755f", "#bab0ac", "#d37295", "#fabfd2", "#b6992d", "#499894"]


def chart(r, path):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    s = r["summary"]
    bars = []  # (label, [(phase, median seconds)], total stats)
    for p in PATHS:
        ps = s["paths"].get(p)
        if ps:
            bars.append((LABELS[p], [(k, v["median"]) for k, v in ps["phases"].items()], ps["total_s"]))
    for key, parts in (("floor-first", "floor_first_parts"), ("floor-cached", "floor_cached_parts")):
        pp = s["floors"].get(parts) or {}
        if all(v for v in pp.values()):
            bars.append((LABELS[key], [(k, v["median"]) for k, v in pp.items()], None))
    bars.reverse()  # first path on top
    colors, extra = dict(COLORS), iter(EXTRA)
    fig, ax = plt.subplots(figsize=(9, 0.55 * len(bars) + 1.6), dpi=90)
    seen = set()
    for y, (label, parts, total) in enumerate(bars):
        x = 0.0
        for name, v in parts:
            if name not in colors:
                colors[name] = next(extra, "#cccccc")
            ax.barh(y, v, left=x, height=0.6, color=colors[name], edgecolor="white", linewidth=0.5,
                    label=None if name in seen else name, hatch="//" if label.startswith("floor") else None)
            seen.add(name)
            x += v
        if total:
            ax.errorbar(total["median"], y, xerr=[[total["median"] - total["min"]], [total["max"] - total["median"]]],
                        fmt="none", ecolor="black", capsize=3, linewidth=1)
            ax.text(total["max"], y, f"  {total['median']:.2f}s", va="center", fontsize=8)
        else:
            ax.text(x, y, f"  {x:.2f}s", va="center", fontsize=8)
    ax.set_yticks(range(len(bars)))
    ax.set_yticklabels([b[0] for b in bars], fontsize=9)
    ax.set_xlabel("seconds from `nerdctl run` to the first /generate answer (median; whiskers: min–max)", fontsize=8)
    h = r["host"]
    ax.set_title(f"Rekindle {r['engine'].upper()} engine, {r['config']['reps']} reps, "
                 f"{h.get('nproc')} cores, {r['started']}", fontsize=10)
    xmax = max((b[2]["max"] if b[2] else sum(v for _, v in b[1])) for b in bars)
    ax.set_xlim(0, xmax * 1.18)
    ax.legend(fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.22), ncol=5, frameon=False)
    ax.grid(axis="x", alpha=0.3)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


def results_page(a):
    import os
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import results_page as rp
    runs = rp.load(a.runs)
    with open(a.page) as f:
        text = f.read()
    history = os.path.join(os.path.dirname(a.page), "benchmarks-history.md")
    with open(history) as f:
        gone = rp.missing_anchors(runs, f.read())
    if gone:
        sys.exit(f"bench-report.py: {a.runs} names sections {history} does not have: {gone}")
    want = {a.page: rp.page(text, runs), a.svg: rp.svg(runs)}
    stale = []
    for path, body in want.items():
        try:
            with open(path) as f:
                same = f.read() == body
        except FileNotFoundError:
            same = False
        if same:
            continue
        if a.check:
            stale.append(path)
            continue
        with open(path + ".tmp", "w") as f:
            f.write(body)
        os.replace(path + ".tmp", path)
        print(f"bench-report.py: wrote {path}")
    if stale:
        sys.exit(f"bench-report.py: {', '.join(stale)} differ from {a.runs}: run 'make bench-page'")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("result", nargs="?")
    ap.add_argument("--png")
    ap.add_argument("--markdown")
    ap.add_argument("--runs", help="bench/results.json: render the results page from it")
    ap.add_argument("--page", default="docs/benchmarks.md")
    ap.add_argument("--svg", default="docs/results.svg")
    ap.add_argument("--check", action="store_true")
    a = ap.parse_args()
    if a.runs:
        results_page(a)
        return
    if not a.result:
        ap.error("give RESULT.json, or --runs")
    with open(a.result) as f:
        r = json.load(f)
    summarize(r)
    with open(a.result + ".tmp", "w") as f:
        json.dump(r, f, indent=1)
        f.write("\n")
    import os
    os.replace(a.result + ".tmp", a.result)
    md = markdown(r)
    if a.markdown:
        with open(a.markdown, "w") as f:
            f.write(md)
    if a.png:
        try:
            chart(r, a.png)
        except ImportError as e:
            print(f"bench-report.py: no chart ({e}): install python3-matplotlib", file=sys.stderr)
    if not a.markdown:
        sys.stdout.write(md)


if __name__ == "__main__":
    main()
