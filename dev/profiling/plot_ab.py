#!/usr/bin/env python3
"""A/B figure: images/s against batch for several `engine bench --json` files of the same backend,
one line per file (e.g. a planner choice on and off), with the ratio of each to the first below.

    dev/profiling/plot_ab.py --label off off.json --label on on.json \\
        --backend cudnn --mode graph -o ab.png

With --variants, each file is instead dev/profiling/fused_variants.sh's text output: one line per variant
and batch, repeated rounds allowed (the median is plotted); the variants are the lines, in order of
first appearance, the first one the ratios' base:

    dev/profiling/plot_ab.py --variants variants.txt -o variants-ab.png
"""
from __future__ import annotations

import argparse
import json
import statistics

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def series(path, backend, mode, scope):
    rows = [r for r in json.load(open(path))["results"]
            if r["backend"] == backend and r["mode"] == mode and r["scope"] == scope]
    rows.sort(key=lambda r: r["batch"])
    return [r["batch"] for r in rows], [r["images_per_s"] for r in rows]


def variant_series(paths):
    """{variant: ([batch...], [median images/s...])} from fused_variants.sh lines, e.g.
    'final          batch     16     0.916 M images/s      17.47 us'."""
    runs: dict[str, dict[int, list[float]]] = {}
    for path in paths:
        for line in open(path):
            f = line.split()
            if len(f) >= 5 and f[1] == "batch" and f[4] == "M":
                runs.setdefault(f[0], {}).setdefault(int(f[2]), []).append(float(f[3]) * 1e6)
    out = {}
    for name, by_batch in runs.items():
        batches = sorted(by_batch)
        out[name] = (batches, [statistics.median(by_batch[b]) for b in batches])
    return out


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("files", nargs="+", help="engine bench --json outputs")
    ap.add_argument("--label", action="append", default=[], help="one per file, in order (JSON files)")
    ap.add_argument("--backend", help="the backend whose results to plot (JSON files)")
    ap.add_argument("--variants", action="store_true", help="the files are dev/profiling/fused_variants.sh output")
    ap.add_argument("--mode", default="graph")
    ap.add_argument("--scope", default="compute")
    ap.add_argument("--title", default="")
    ap.add_argument("-o", "--output", required=True)
    a = ap.parse_args(argv)
    if a.variants:
        lines = variant_series(a.files)
        if not lines:
            ap.error(f"no fused_variants.sh lines in {', '.join(a.files)}")
        title = a.title or "custom, CUDA graph, compute (dev/profiling/fused_variants.sh)"
    else:
        if len(a.label) != len(a.files) or not a.backend:
            ap.error("give --backend and one --label per file (or --variants)")
        lines = {label: series(path, a.backend, a.mode, a.scope) for path, label in zip(a.files, a.label)}
        title = a.title or f"{a.backend}, {a.mode}, {a.scope}"
    fig, (top, bottom) = plt.subplots(2, 1, figsize=(7, 6), sharex=True, gridspec_kw={"height_ratios": [2, 1]})
    base = None
    first = next(iter(lines))
    for label, (b, v) in lines.items():
        top.plot(b, v, marker="o", label=label)
        if base is None:
            base = dict(zip(b, v))
        keep = [(k, x) for k, x in zip(b, v) if k in base]
        bottom.plot([k for k, _ in keep], [x / base[k] for k, x in keep], marker="o", label=f"{label} / {first}")
    top.set(xscale="log", yscale="log", ylabel="images/s", title=title)
    bottom.set(xscale="log", xlabel="batch size", ylabel="ratio")
    bottom.axhline(1.0, color="grey", lw=0.8)
    for ax in (top, bottom):
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(a.output, dpi=110)
    print(f"wrote {a.output}")


if __name__ == "__main__":
    main()
