"""The results page's parts, rendered from bench/results.json (the newest run
of each engine and model size): the markdown table that docs/benchmarks.md
holds between its results markers, and the chart docs/results.svg, time to
the first token of a cold start against a first and a cached restore, on a
log scale (cold starts take minutes, restores seconds). Stdlib only: the
chart is plain SVG. bench-report.py --runs calls these."""

import json
import math
import re
from xml.sax.saxutils import escape

BEGIN = "<!-- results: made by bench-report.py --runs bench/results.json; edit that file -->"
END = "<!-- results end -->"
PATHS = (("cold_s", "cold start", "#9e9e9e"), ("first_s", "first restore", "#e07b39"),
         ("cached_s", "cached restore", "#2f6db5"))


def load(path):
    with open(path) as f:
        runs = json.load(f)["runs"]
    for r in runs:
        for k, _, _ in PATHS:
            if not isinstance(r.get(k), (int, float)) or r[k] <= 0:
                raise ValueError(f"{path}: {r.get('engine')}, {r.get('model')}: {k} is not a positive number")
    return runs


def slug(heading):
    """GitHub's anchor of a markdown heading."""
    s = re.sub(r"[^\w\- ]", "", heading.strip().lower())
    return s.replace(" ", "-")


def label(r):
    return f"{r['engine']}, {r['model']}"


def table(runs):
    lines = ["| engine | model | host, date | cold start | first restore | cached restore | cold / cached |",
             "|---|---|---|---|---|---|---|"]
    for r in runs:
        first = f"{r['first_s']:.2f} s" + (f" ({r['first_note']})" if r.get("first_note") else "")
        cached = f"**{r['cached_s']:.2f} s**" + (f" ({r['cached_note']})" if r.get("cached_note") else "")
        lines.append(f"| [{r['engine']}](benchmarks-history.md#{slug(r['history'])}) | {r['model']} | "
                     f"{r['host']}, {r['date']} | {r['cold_s']:.2f} s | {first} | {cached} | "
                     f"{r['cold_s'] / r['cached_s']:.1f}x |")
    return "\n".join(lines)


def svg(runs):
    """A horizontal bar per path, three per run, x on a log scale from 1 s."""
    left, width, bar, gap, top = 370, 520, 9, 10, 40
    hi = 10 ** math.ceil(math.log10(max(r[k] for r in runs for k, _, _ in PATHS)))
    x = lambda s: left + width * math.log10(max(s, 1)) / math.log10(hi)
    rows = top + len(runs) * (3 * bar + gap)
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{left + width + 70}" height="{rows + 40}" '
           'font-family="sans-serif" font-size="11">',
           '<rect width="100%" height="100%" fill="white"/>',
           f'<text x="{left}" y="16" font-size="13">Time to the first token, seconds (log scale)</text>']
    for i, (_, name, color) in enumerate(PATHS):
        out.append(f'<rect x="{left + 150 * i}" y="24" width="10" height="8" fill="{color}"/>'
                   f'<text x="{left + 150 * i + 14}" y="32">{name}</text>')
    t = 1
    while t <= hi:
        out.append(f'<line x1="{x(t):.1f}" y1="{top - 4}" x2="{x(t):.1f}" y2="{rows}" stroke="#ddd"/>'
                   f'<text x="{x(t):.1f}" y="{rows + 14}" text-anchor="middle">{t}</text>')
        t *= 10
    for n, r in enumerate(runs):
        y = top + n * (3 * bar + gap)
        out.append(f'<text x="{left - 6}" y="{y + 1.5 * bar + 4}" text-anchor="end">{escape(label(r))}</text>')
        for i, (k, _, color) in enumerate(PATHS):
            yy = y + i * bar
            out.append(f'<rect x="{left}" y="{yy}" width="{x(r[k]) - left:.1f}" height="{bar - 1}" fill="{color}"/>'
                       f'<text x="{x(r[k]) + 3:.1f}" y="{yy + bar - 1}">{r[k]:.1f}</text>')
    out.append("</svg>")
    return "\n".join(out) + "\n"


def page(text, runs):
    """text with the part between the markers replaced by the table."""
    if BEGIN not in text or END not in text:
        raise ValueError(f"the page has no results markers: add a line '{BEGIN}' and a line '{END}'")
    head, rest = text.split(BEGIN, 1)
    _, tail = rest.split(END, 1)
    return f"{head}{BEGIN}\n{table(runs)}\n{END}{tail}"


def missing_anchors(runs, history):
    have = {slug(m) for m in re.findall(r"^#+ (.+)$", history, re.M)}
    return [r["history"] for r in runs if slug(r["history"]) not in have]
